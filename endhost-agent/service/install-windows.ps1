# Registers the Homework end-host agent as a Windows service (run in an elevated PowerShell).
# The binary talks to the Service Control Manager itself (golang.org/x/sys/windows/svc):
# Stop and Shutdown make it deliver what is queued and exit.
# -RouterKey is the household's key from the router's web UI; it is kept in a file that only
# SYSTEM and Administrators may read.
param(
    [Parameter(Mandatory = $true)][string]$RouterKey,
    [string]$Binary = "$env:ProgramFiles\Homework\endhost-agent.exe",
    [string]$KeyFile = "$env:ProgramData\Homework\router-key"
)

New-Item -ItemType Directory -Force -Path (Split-Path $KeyFile) | Out-Null
Set-Content -Path $KeyFile -Value $RouterKey -NoNewline
icacls $KeyFile /inheritance:r /grant:r "SYSTEM:R" "Administrators:F" | Out-Null

New-Service -Name "endhost-agent" `
    -BinaryPathName "`"$Binary`" --router-key-file `"$KeyFile`"" `
    -DisplayName "Homework end-host agent" `
    -Description "Tells the home router which program owns each connection through it." `
    -StartupType Automatic
# Restart after a crash: after 5 s, then 5 s, then 60 s.
sc.exe failure endhost-agent reset= 86400 actions= restart/5000/restart/5000/restart/60000
Start-Service endhost-agent

# Registers the Homework end-host agent as a Windows service (run in an elevated PowerShell).
# The binary talks to the Service Control Manager itself (golang.org/x/sys/windows/svc):
# Stop and Shutdown make it deliver what is queued and exit.
param([string]$Binary = "$env:ProgramFiles\Homework\endhost-agent.exe")

New-Service -Name "endhost-agent" `
    -BinaryPathName "`"$Binary`"" `
    -DisplayName "Homework end-host agent" `
    -Description "Tells the home router which program owns each connection through it." `
    -StartupType Automatic
# Restart after a crash: after 5 s, then 5 s, then 60 s.
sc.exe failure endhost-agent reset= 86400 actions= restart/5000/restart/5000/restart/60000
Start-Service endhost-agent

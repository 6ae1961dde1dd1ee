package source

import (
	"net/netip"
	"testing"
)

func TestGopsutilAddressesAndProgramNames(t *testing.T) {
	for in, want := range map[string]string{"*": "0.0.0.0", "10.2.0.10": "10.2.0.10", "[fe80::1]": "fe80::1", "::1": "::1"} {
		if got, ok := parseAddr(in); !ok || got != netip.MustParseAddr(want) {
			t.Errorf("parseAddr(%q) = %v, %v; want %s", in, got, ok, want)
		}
	}
	if _, ok := parseAddr(""); ok {
		t.Error("an empty peer parsed as an address")
	}
	for in, want := range map[string]string{"/usr/lib/firefox/firefox": "firefox", "/bin/sleep": "sleep", "Zoom.EXE": "Zoom", "zoom.exe": "zoom"} {
		if got := programName(in); got != want {
			t.Errorf("programName(%q) = %q, want %q", in, got, want)
		}
	}
}

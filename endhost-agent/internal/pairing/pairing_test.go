package pairing

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func sequence(start byte) (b [32]byte) {
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

// The known answer hwdb's own test checks too (hwdb/src/pairing.rs), so both sides agree.
func TestProofMatchesHWDBsKnownAnswer(t *testing.T) {
	got := hex.EncodeToString(Proof(Key(sequence(0)), Nonce(sequence(0x40)), "10.2.0.1:987"))
	if want := "2954b3d3722b2a8b0de8b1cf31b9c349c391061422e1fd936dd44b5be0556083"; got != want {
		t.Fatalf("proof %s, want %s", got, want)
	}
}

func TestOnlyTheKeysProofForThisNonceAndAddressIsAccepted(t *testing.T) {
	key, nonce, addr := Key(sequence(0)), Nonce(sequence(0x40)), "10.2.0.1:987"
	right := hex.EncodeToString(Proof(key, nonce, addr))
	if err := Check(key, nonce, addr, right); err != nil {
		t.Fatalf("the right proof was rejected: %v", err)
	}
	otherKey, otherNonce := Key(sequence(1)), Nonce(sequence(0x41))
	for name, answer := range map[string]string{
		"another key":       hex.EncodeToString(Proof(otherKey, nonce, addr)),
		"an earlier nonce":  hex.EncodeToString(Proof(key, otherNonce, addr)),
		"another address":   hex.EncodeToString(Proof(key, nonce, "192.168.1.1:987")),
		"a truncated proof": right[:62],
		"not hex":           "zz" + right[2:],
		"an empty answer":   "",
		"one digit changed": flip(right),
	} {
		if err := Check(key, nonce, addr, answer); !errors.Is(err, ErrWrongProof) {
			t.Errorf("%s: err %v, want ErrWrongProof", name, err)
		}
	}
}

func TestKeysAreReadAsTheRouterWritesThem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.key")
	key := sequence(0)
	text := hex.EncodeToString(key[:]) + "\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := ReadKeyFile(path); err != nil || k != Key(sequence(0)) {
		t.Fatalf("ReadKeyFile: %x, %v", k, err)
	}
	for _, bad := range []string{"", "abcd", text[:63], text + "00", "not hex at all"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

func TestStatementQuotesTheAddress(t *testing.T) {
	nonce := sequence(0)
	got := Statement(Nonce(nonce), "it's")
	want := "prove '" + hex.EncodeToString(nonce[:]) + "' for 'it''s'"
	if got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}

// flip changes the proof's last hex digit.
func flip(proof string) string {
	last := byte('0')
	if proof[len(proof)-1] == '0' {
		last = '1'
	}
	return proof[:len(proof)-1] + string(last)
}

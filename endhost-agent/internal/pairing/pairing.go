// Package pairing checks that the router the agent reports to is this household's: the router
// proves it holds the household's agent key (given to the agent as --router-key from the
// router's web UI) by answering a fresh nonce. The proof is HMAC-SHA256(key, Context || nonce ||
// the address the agent sent to), as hwdb computes it (hwdb/src/pairing.rs). Pure: the reporter
// does the asking.
package pairing

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

const (
	// KeyBytes and NonceBytes are the sizes of the household's key and of a challenge's nonce.
	KeyBytes   = 32
	NonceBytes = 32
	// Context separates these proofs from any other use of the key (the same bytes as hwdb's).
	Context = "homework agent: prove this router holds the household key\x00"
)

// Key is the household's agent key.
type Key [KeyBytes]byte

// Nonce is one challenge's random bytes.
type Nonce [NonceBytes]byte

// ErrWrongProof: the router answered, but not with this key's proof (another household's
// router, or a wrong --router-key).
var ErrWrongProof = errors.New("its proof does not match this agent's key (another household's router, or a wrong key)")

// ParseKey reads a key written as 64 hex characters (surrounding white space ignored).
func ParseKey(text string) (Key, error) {
	var k Key
	b, err := hex.DecodeString(strings.TrimSpace(text))
	if err != nil || len(b) != KeyBytes {
		return k, fmt.Errorf("a router key is %d bytes as %d hex characters", KeyBytes, 2*KeyBytes)
	}
	copy(k[:], b)
	return k, nil
}

// ReadKeyFile reads a key from a file holding it as ParseKey reads it.
func ReadKeyFile(path string) (Key, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return Key{}, err
	}
	k, err := ParseKey(string(text))
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// NewNonce is a fresh random nonce from the OS.
func NewNonce() (Nonce, error) {
	var n Nonce
	_, err := rand.Read(n[:])
	return n, err
}

// Proof is what a router holding key answers to nonce sent to addr.
func Proof(key Key, nonce Nonce, addr string) []byte {
	mac := hmac.New(sha256.New, key[:])
	mac.Write([]byte(Context))
	mac.Write(nonce[:])
	mac.Write([]byte(addr))
	return mac.Sum(nil)
}

// Statement asks the router at addr for its proof of nonce.
func Statement(nonce Nonce, addr string) string {
	return fmt.Sprintf("prove '%s' for '%s'", hex.EncodeToString(nonce[:]), strings.ReplaceAll(addr, "'", "''"))
}

// Check accepts answer (hex) only if it is key's proof of nonce sent to addr; the comparison
// takes the same time wherever the answer differs.
func Check(key Key, nonce Nonce, addr, answer string) error {
	got, err := hex.DecodeString(answer)
	if err != nil || !hmac.Equal(got, Proof(key, nonce, addr)) {
		return ErrWrongProof
	}
	return nil
}

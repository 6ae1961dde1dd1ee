// Package agenterr is the agent's one error type: every failure says which step failed and
// whether trying again later can help, so the main loop decides retry or give-up in one place.
package agenterr

import (
	"errors"
	"fmt"
)

// Kind says what the caller should do about an error.
type Kind int

const (
	// Transient failures (router unreachable, hwdb busy, a dump interrupted) may succeed later.
	Transient Kind = iota
	// Refused: the router answered and will never accept this (e.g. a row about another address).
	Refused
	// Fatal: the agent cannot work here (no default gateway, no permission to read sockets).
	Fatal
)

func (k Kind) String() string {
	switch k {
	case Transient:
		return "transient"
	case Refused:
		return "refused"
	default:
		return "fatal"
	}
}

// Error wraps the cause with the step that failed ("discover router", "dump sockets", ...).
type Error struct {
	Op   string
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Op, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// New builds an *Error.
func New(op string, kind Kind, err error) *Error { return &Error{Op: op, Kind: kind, Err: err} }

// KindOf is the kind of err, Fatal when err is not an *Error (an unexpected failure).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Fatal
}

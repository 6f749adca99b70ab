package providers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Kind says whether retrying can help.
type Kind int

const (
	// Transient failures (5xx, 429, throttling, network) pass; retry with backoff.
	Transient Kind = iota
	// Permanent failures (invalid record, credentials refused, zone not found) need a
	// change of input or configuration.
	Permanent
)

func (k Kind) String() string {
	if k == Permanent {
		return "permanent"
	}
	return "transient"
}

// Error is a provider failure, classified.
type Error struct {
	Provider string
	// Op is the operation: ResolveZone, ListRecords, ApplyChanges.
	Op   string
	Kind Kind
	// Code is the provider's error code or HTTP status, for metrics.
	Code string
	// RetryAfter is how long the provider asked to wait, if it said.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s (%s): %v", e.Provider, e.Op, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// IsPermanent reports whether err was classified permanent: retrying it unchanged
// will not help. Unclassified errors count as transient.
func IsPermanent(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Kind == Permanent
}

// RetryAfter returns how long the provider asked to wait before retrying, or 0.
func RetryAfter(err error) time.Duration {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

// ErrorCode returns the provider's code for err ("" when there is none), for metrics.
func ErrorCode(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// IsNetwork reports whether err is a connection failure or timeout, which is transient.
func IsNetwork(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

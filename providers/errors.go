package providers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
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

type sendsKey struct{}

// CountSends returns a context whose HTTP requests count themselves in the returned
// counter as a LimitedTransport sends them: SDKs resend a write whose connection
// dropped, and the attempt that got no answer may have been applied.
func CountSends(ctx context.Context) (context.Context, *atomic.Int32) {
	n := &atomic.Int32{}
	return context.WithValue(ctx, sendsKey{}, n), n
}

func countSend(ctx context.Context) {
	if n, ok := ctx.Value(sendsKey{}).(*atomic.Int32); ok {
		n.Add(1)
	}
}

// ResentRejection is the error for a write rejected after it was sent more than
// once. "Already exists" or "not found" may answer the resend of a change an earlier,
// unanswered attempt applied, so it is not a verdict on the change: it is transient,
// and the caller lists the zone again and plans what is still missing. A change that
// is really invalid is rejected again when sent once, and is permanent then.
func ResentRejection(provider string, sends int32, err error) error {
	return &Error{Provider: provider, Op: "ApplyChanges", Kind: Transient, Code: "resent",
		Err: fmt.Errorf("rejected after %d sends, an earlier one may have been applied unanswered: %w", sends, err)}
}

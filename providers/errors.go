package providers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/clip"
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
	// Refused: the provider answered that it took none of the request (429, 503,
	// throttling), so nothing of it was applied.
	Refused bool
	Err     error
}

// maxErrorText bounds the text an Error quotes of what it wraps. A provider's error
// can carry the whole body of an answer (Cloudflare's SDK quotes it; a gateway in
// front of it may answer 502 with megabytes), and the text goes to logs, statuses
// and events on every retry.
const maxErrorText = 2048

// Error reads "provider Op (kind, code): what failed"; the code comes first, where
// the cut of a long text cannot take it.
func (e *Error) Error() string {
	text := "<nil>"
	if e.Err != nil {
		text = clip.String(e.Err.Error(), maxErrorText)
	}
	if e.Code != "" {
		return fmt.Sprintf("%s %s (%s, %s): %s", e.Provider, e.Op, e.Kind, e.Code, text)
	}
	return fmt.Sprintf("%s %s (%s): %s", e.Provider, e.Op, e.Kind, text)
}

// Incomplete is the transient error of an answer that cannot be the provider's whole
// truth (a listing cut short, or one that never ends): code "incomplete".
func Incomplete(provider, op, format string, args ...any) error {
	return &Error{Provider: provider, Op: op, Kind: Transient, Code: "incomplete", Err: fmt.Errorf(format, args...)}
}

// Quote returns err with its text made once, within maxErrorText. The providers'
// classify wrap the SDKs' errors in it: a zone's failed listing is the outcome of
// every route with records there, and each formats it, so a 1 MB answer quoted at
// each Error() call cost a megabyte a route. errors.As still finds the SDK's error.
func Quote(err error) error {
	if err == nil {
		return nil
	}
	return &quoted{text: clip.String(err.Error(), maxErrorText), err: err}
}

type quoted struct {
	text string
	err  error
}

func (q *quoted) Error() string { return q.text }
func (q *quoted) Unwrap() error { return q.err }

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

// Sends counts the HTTP requests of one provider call whose outcome is uncertain:
// SDKs resend a write whose connection dropped, or that got a 500, and the attempt
// may have been applied all the same.
type Sends struct{ uncertain atomic.Int32 }

// CountSends returns a context whose HTTP requests report to the returned Sends as a
// LimitedTransport sends them.
func CountSends(ctx context.Context) (context.Context, *Sends) {
	s := &Sends{}
	return context.WithValue(ctx, sendsKey{}, s), s
}

func sendsOf(ctx context.Context) *Sends {
	s, _ := ctx.Value(sendsKey{}).(*Sends)
	return s
}

// Uncertain reports whether an attempt of the call got no answer, or a 5xx that
// does not say the request was not taken.
func (s *Sends) Uncertain() bool { return s.uncertain.Load() > 0 }

// Unsure is the error of a write of which an attempt's outcome is uncertain (no
// answer, a 500), whatever the last attempt got: "already exists" or "not found" may
// answer the resend of a change that attempt applied, and a 503 no longer says
// nothing was applied. It is transient and not Refused, so the zone is listed again
// and only what is still missing planned; a change that is really invalid is rejected
// again when sent once, and is permanent then.
func Unsure(err error) error {
	e := &Error{Kind: Transient, Code: "uncertain", Op: "ApplyChanges",
		Err: fmt.Errorf("an attempt got no answer, or a 5xx, and may have been applied: %w", err)}
	var pe *Error
	if errors.As(err, &pe) {
		e.Provider, e.Op = pe.Provider, pe.Op
	}
	return e
}

// Refused reports whether the provider answered err's request saying it took none
// of it (429, 503, throttling): what was known of the zone before still holds.
func Refused(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Refused
}

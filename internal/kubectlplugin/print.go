package kubectlplugin

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// printf is fmt.Fprintf with every string, error and Stringer argument made safe for a
// terminal. What the plugin prints comes from tenants (spec.failover.reason, a region's
// name, condition messages that quote them) and from zones others write to (a TXT
// record's content, a provider's error): printed as is to an operator's terminal, an
// escape sequence could rewrite the screen or set the clipboard, and a newline or a tab
// forge a row of a table.
func printf(w io.Writer, format string, args ...any) {
	if false {
		_ = fmt.Sprintf(format, args...) // makes go vet check printf's callers as fmt's
	}
	safe := make([]any, len(args))
	for i, a := range args {
		switch a.(type) {
		case error, fmt.Stringer:
			safe[i] = terminalSafe(fmt.Sprint(a)) // fmt survives a nil pointer's method
		default:
			if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
				safe[i] = terminalSafe(rv.String())
			} else {
				safe[i] = a
			}
		}
	}
	_, _ = fmt.Fprintf(w, format, safe...)
}

// terminalSafe writes the control characters of s (C0, DEL, C1, and the bidirectional
// overrides that reorder what is shown) and invalid UTF-8 as Go escapes.
func terminalSafe(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			q := fmt.Sprintf("%+q", string(r))
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || (r >= 0x202a && r <= 0x202e) ||
		(r >= 0x2066 && r <= 0x2069) || r == utf8.RuneError
}

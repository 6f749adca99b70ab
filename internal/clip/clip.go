// Package clip bounds text that comes from outside (a provider's error, a list of
// hostnames, an ACME server's answer) before it is logged or stored: the API server
// refuses a whole status or event past its limits, and a log line of megabytes costs
// every reader of the logs.
package clip

import "unicode/utf8"

// String cuts s to at most max bytes, on a rune boundary, marking the cut, and
// replaces each byte that is not UTF-8 with U+FFFD. The API server stores text as
// JSON, which makes both replacements: without them the text stored (a status
// condition's message) never equals the next sync's, and every sync writes it again.
func String(s string, max int) string {
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // one U+FFFD per invalid byte, as encoding/json writes it
	}
	if len(s) <= max {
		return s
	}
	const mark = " ..."
	cut := max - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

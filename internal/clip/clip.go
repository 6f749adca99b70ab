// Package clip bounds text that comes from outside (a provider's error, a list of
// hostnames, an ACME server's answer) before it is logged or stored: the API server
// refuses a whole status or event past its limits, and a log line of megabytes costs
// every reader of the logs.
package clip

import "unicode/utf8"

// String cuts s to at most max bytes, on a rune boundary, marking the cut. A cut
// inside a character would be stored as U+FFFD, never equal to the next sync's
// text.
func String(s string, max int) string {
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

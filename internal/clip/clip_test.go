package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStringCutsWithinBoundsOnARuneBoundary(t *testing.T) {
	if got := String("short", 10); got != "short" {
		t.Errorf("a string within bounds became %q", got)
	}
	for _, s := range []string{strings.Repeat("é", 600), strings.Repeat("a", 5) + strings.Repeat("日本", 400), strings.Repeat("x", 5000)} {
		for _, max := range []int{16, 17, 18, 1024} {
			got := String(s, max)
			if len(got) > max || !utf8.ValidString(got) || !strings.HasSuffix(got, " ...") || !strings.HasPrefix(s, strings.TrimSuffix(got, " ...")) {
				t.Errorf("String(%d bytes, %d) = %q (%d bytes)", len(s), max, got, len(got))
			}
		}
	}
}

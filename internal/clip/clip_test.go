package clip

import (
	"encoding/json"
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
			kept := strings.TrimSuffix(got, " ...")
			if len(got) > max || len(kept) <= max-len(" ...")-utf8.UTFMax || !utf8.ValidString(got) ||
				!strings.HasSuffix(got, " ...") || !strings.HasPrefix(s, kept) {
				t.Errorf("String(%d bytes, %d) = %q (%d bytes)", len(s), max, got, len(got))
			}
		}
	}
}

// Text clipped once reads back from JSON as it was written: a condition's message
// compared with the stored one is equal when nothing changed.
func TestStringIsStoredAsItIs(t *testing.T) {
	for _, s := range []string{"ok", "bad \xff\xfe bytes", strings.Repeat("é", 600) + "\xc3", "\xe6\x97" + strings.Repeat("z", 2000)} {
		got := String(s, 1024)
		raw, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		var stored string
		if err := json.Unmarshal(raw, &stored); err != nil {
			t.Fatal(err)
		}
		if stored != got || String(got, 1024) != got {
			t.Errorf("String(%q) = %q, stored as %q", s, got, stored)
		}
	}
}

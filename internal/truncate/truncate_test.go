package truncate

import (
	"strings"
	"testing"
)

func TestTruncate(t *testing.T) {
	long := strings.Repeat("a", 10) + "\n"
	for _, tt := range []struct {
		name, s                string
		max                    int
		wantString, wantQuoted string
	}{
		{"empty", "", 4, "", `""`},
		{"shorter than max", "ab\n", 4, "ab\n", `"ab\n"`},
		{"exactly max", "abcd", 4, "abcd", `"abcd"`},
		{"longer than max", long, 4, "aaaa… (11 bytes)", `"aaaa"… (11 bytes)`},
		{"max 0", "x", 0, "… (1 bytes)", `""… (1 bytes)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.s, tt.max); got != tt.wantString {
				t.Errorf("String(%q, %d) = %q, want %q", tt.s, tt.max, got, tt.wantString)
			}
			if got := Quoted(tt.s, tt.max); got != tt.wantQuoted {
				t.Errorf("Quoted(%q, %d) = %q, want %q", tt.s, tt.max, got, tt.wantQuoted)
			}
		})
	}
}

package parley_test

import (
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

func TestCheckDisplayName(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"Ana", "Ana", true},
		{"  Ana Lima\t", "Ana Lima", true},
		{"", "", true},
		{" \n ", "", true}, // white space only: cleared
		{"安娜", "安娜", true},
		{strings.Repeat("é", 64), strings.Repeat("é", 64), true},
		{" " + strings.Repeat("é", 64) + " ", strings.Repeat("é", 64), true},
		{strings.Repeat("é", 65), "", false},
		{"a\nb", "", false},
		{"a\x7fb", "", false},
		{"a\u2028b", "", false},
		{"a\x00", "", false},
		{"a\xff", "", false},
	}
	for _, tt := range tests {
		got, err := parley.CheckDisplayName(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("CheckDisplayName(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("CheckDisplayName(%q): code %q", tt.in, parley.ErrorCode(err))
		}
	}
}

func FuzzCheckDisplayName(f *testing.F) {
	for _, s := range []string{"Ana", " x ", "a\nb", strings.Repeat("é", 65), "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parley.CheckDisplayName(s)
		if err != nil {
			return
		}
		if again, err := parley.CheckDisplayName(got); err != nil || again != got {
			t.Fatalf("a checked name %q does not check again: %q %v", got, again, err)
		}
		if strings.TrimSpace(got) != got {
			t.Fatalf("%q is not trimmed", got)
		}
	})
}

func TestCheckChangePassword(t *testing.T) {
	for _, tt := range []struct {
		current, next string
		ok            bool
	}{
		{"old password", "new password", true},
		{"", "new password", false},
		{"old password", "short", false},
		{strings.Repeat("x", 1025), "new password", false},
	} {
		if err := parley.CheckChangePassword(tt.current, tt.next); (err == nil) != tt.ok {
			t.Errorf("CheckChangePassword(%q, %q): %v, want ok %v", tt.current, tt.next, err, tt.ok)
		}
	}
}

package parley_test

import (
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

func TestValidBlobKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{parley.NewID(), true},
		{parley.NewID() + "-thumb", true},
		{"a", true},
		{"0_9-z", true},
		{strings.Repeat("k", parley.MaxBlobKey), true},
		{"", false},
		{strings.Repeat("k", parley.MaxBlobKey+1), false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a\\b", false},
		{"a.b", false},
		{"Abc", false},
		{"a b", false},
		{"a\x00", false},
		{"é", false},
	} {
		err := parley.ValidBlobKey(tc.key)
		if got := err == nil; got != tc.ok {
			t.Errorf("ValidBlobKey(%q) = %v, want ok %v", tc.key, err, tc.ok)
		}
		if err != nil && parley.ErrorCode(err) != parley.CodeInvalidArgument {
			t.Errorf("ValidBlobKey(%q) = %v, want INVALID_ARGUMENT", tc.key, err)
		}
	}
	// A prefix may be empty: List("") walks every blob.
	if err := parley.ValidBlobPrefix(""); err != nil {
		t.Errorf("ValidBlobPrefix(\"\") = %v", err)
	}
	if err := parley.ValidBlobPrefix("a/"); parley.ErrorCode(err) != parley.CodeInvalidArgument {
		t.Errorf("ValidBlobPrefix(\"a/\") = %v, want INVALID_ARGUMENT", err)
	}
}

package password_test

import (
	"strings"
	"testing"

	"github.com/parleychat/parley/password"
)

func TestPassword(t *testing.T) {
	h := password.Hash("correct horse")
	if !password.Check(h, "correct horse") {
		t.Error("right password rejected")
	}
	for _, tt := range []struct{ hash, pw string }{
		{h, "correct horsf"}, {h, ""}, {"", "correct horse"}, {"$argon2id$garbage", "x"},
		{strings.Replace(h, "t=2", "t=999", 1), "correct horse"},
	} {
		if password.Check(tt.hash, tt.pw) {
			t.Errorf("Check(%q, %q) = true", tt.hash, tt.pw)
		}
	}
	if h2 := password.Hash("correct horse"); h2 == h {
		t.Error("two hashes of one password are equal: no salt")
	}
}

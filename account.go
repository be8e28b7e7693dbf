package parley

import (
	"strings"
	"time"
	"unicode"
)

// Accounts a person manages: a display name, a password change that logs
// out every other device, and the list of signed-in devices.

// MaxDisplayNameChars bounds a display name (Unicode code points, after
// trimming).
const MaxDisplayNameChars = 64

// CheckDisplayName validates a display name and returns it trimmed of
// surrounding white space: valid UTF-8, no control characters, at most
// MaxDisplayNameChars characters. The empty string (after trimming) is
// valid and clears the name. Violations are INVALID_ARGUMENT.
func CheckDisplayName(name string) (string, error) {
	if n := charCount(name); n < 0 {
		return "", Errorf(CodeInvalidArgument, "display_name must be valid UTF-8")
	}
	name = strings.TrimSpace(name)
	if charCount(name) > MaxDisplayNameChars {
		return "", Errorf(CodeInvalidArgument, "display_name must be at most %d characters", MaxDisplayNameChars)
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return "", Errorf(CodeInvalidArgument, "display_name must not contain control characters")
		}
	}
	return name, nil
}

// ErrWrongPassword answers a password change whose current password does
// not match. It is INVALID_ARGUMENT, not UNAUTHENTICATED: the caller's
// token is fine, and a client that saw UNAUTHENTICATED would log out.
var ErrWrongPassword = Errorf(CodeInvalidArgument, "the current password is wrong")

// CheckChangePassword validates the arguments of Store.ChangePassword
// before any storage work: a current password of 1–1024 bytes and a new
// one ValidateNewPassword accepts.
func CheckChangePassword(current, next string) error {
	if current == "" || len(current) > 1024 {
		return Errorf(CodeInvalidArgument, "current password must be 1–1024 bytes")
	}
	return ValidateNewPassword(next)
}

// CheckDeviceID validates a device id named in a request (1–64
// characters of valid UTF-8 without NUL); violations are INVALID_ARGUMENT.
func CheckDeviceID(device string) error { return validOpaque("device_id", device) }

// DeviceSession is one signed-in device of a user (Store.Sessions): a
// device with at least one token of its current install that is still
// within its lifetime.
type DeviceSession struct {
	DeviceID  string
	CreatedAt time.Time // when the oldest such token was issued (its login)
	LastSeen  time.Time // the latest refresh of its tokens (to within Options.TokenRefresh)
	Current   bool      // the device of the principal that asked
}

// Package config is Parley's policy file: one YAML file, given to
// `parley serve --config parley.yaml`, holding what may change while the
// server runs — rate limits, trusted proxies, access modes, permission
// rules, new-flow switches, retries and timeouts. Process settings (--addr,
// --db, --data-dir) stay flags. testdata/parley.yaml is the documented
// example of every key.
//
// # Fail-safe defaults
//
// A hot-reloaded file can be missing a value or hold a wrong one at any
// moment. Every value therefore has a stated default, and the default points
// to the side whose mistake costs less:
//
//	value                 what a mistake costs          missing or malformed
//	rate limits (section) an open door to scripts       missing: the built-in defaults (DefaultRateLimits)
//	rate limit (bucket)   blocking legitimate traffic   malformed: off (limit 0)
//	access mode           opening a closed feature      missing: the feature's default; unknown: CLOSED
//	access window         opening a closed feature      any bad field: always outside
//	time zone             windows shifting by hours     UTC when missing; unknown: every window outside
//	permission rule       privilege escalation          a missing or bad rule denies
//	new-flow switch       running an unproven path      false (the old flow)
//	retries, backoff      skipped calls, negative sleep default when malformed; negative clamps to 0
//	timeouts              a hang                        the default, never "no timeout"
//	trusted proxy         a spoofable client address    a bad entry is dropped (not trusted)
//	metrics.allow         metrics read by strangers     a bad entry is dropped (loopback only)
//	shared rate store     a broken limiter              local (per instance)
//	edit window           refusing edits, or allowing   missing or malformed: none (edits allowed)
//	@all limit            a noisy @all                  malformed: 50; negative clamps to 0 (@all off)
//	directory             showing users to strangers    missing: all; unknown: shared
//	max_file_size         refusing files, or huge ones  malformed or < 1: 100 MiB
//	file_quota            refusing files, or a full disk malformed or < 1: 10 GiB
//	push.allow_endpoints  pushes reaching internal hosts a bad entry is dropped (not allowed)
//	push.subject          a push service's contact      not mailto: or https: — the default
//
// So Parse fails only when the file is not a YAML mapping (a syntax error,
// duplicate keys, an empty file, a list at the top): a reloading server then
// keeps its last good configuration (see Watcher). A bad value never fails
// the parse; it resolves to its safe side and Parse returns a warning naming
// the key path, the line and the reason. Unknown keys are warnings too.
//
// A Config is immutable once Parse returns it; Watcher swaps whole Configs,
// so one request sees one consistent policy.
package config

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	// Access windows are read in a named zone; embedding the zone
	// database makes that work on hosts without /usr/share/zoneinfo.
	_ "time/tzdata"
)

// Mode is the access mode of a gated feature.
type Mode string

// The access modes. Anything else in the file resolves to ModeClosed.
const (
	ModeOpen       Mode = "OPEN"        // always allowed
	ModeTestWindow Mode = "TEST_WINDOW" // allowed only inside the feature's window
	ModeClosed     Mode = "CLOSED"      // never allowed
)

// Limit is the rate limit of one route bucket. The zero Limit (Limit 0) is
// off; a Limit with Limit > 0 always has Window > 0.
type Limit struct {
	Limit  int
	Window time.Duration
}

// Defaults named in the file schema.
const (
	DefaultRateWindow      = time.Minute
	DefaultExportRetries   = 3
	DefaultExportBackoff   = time.Second
	DefaultExportKeep      = 7 * 24 * time.Hour
	DefaultExportMaxActive = 2
	DefaultExportMaxKept   = 10
	MinSigningSecret       = 32 // bytes of an export signing secret
	DefaultStoreTimeout    = 10 * time.Second
	DefaultRedisTimeout    = 200 * time.Millisecond
	DefaultIdentityTimeout = 2 * time.Second
	DefaultMentionAllMax   = 50
	DefaultMaxFileSize     = 100 << 20 // bytes of one uploaded file (parley.DefaultMaxFileSize)
	DefaultFileQuota       = 10 << 30  // bytes of one user's files (parley.DefaultFileQuota)
)

// The directory policies: who GET /api/users lists to a caller.
const (
	DirectoryAll    = "all"    // every active user
	DirectoryShared = "shared" // only users who share a conversation with the caller
)

// defaultModes are the documented modes of the known gated features when the
// file does not set one. Any other feature defaults to ModeClosed.
var defaultModes = map[string]Mode{
	"exports":  ModeOpen,
	"webhooks": ModeOpen,
}

// Roles a permission rule may name (parley.RoleUser, parley.RoleAdmin).
var knownRoles = []string{"user", "admin"}

// Config is a resolved configuration. Every accessor returns a value inside
// its safe range; none fails.
type Config struct {
	loc    *time.Location
	zoneOK bool // false: the configured zone is unknown, every window is outside

	proxies []netip.Prefix
	// metricsAllow are the networks besides loopback that may read
	// /metrics on the public listener.
	metricsAllow []netip.Prefix
	// limits are the buckets the file names; a bucket it does not name
	// takes builtin's (nil when the file has rate_limits: {} or a
	// malformed section: every unnamed bucket is off).
	limits   map[string]Limit
	builtin  map[string]Limit
	redisURL string

	features map[string]feature
	perms    map[string][]string // rule → roles; an empty list denies everyone
	switches map[string]bool

	retries   int
	backoff   time.Duration
	keep      time.Duration
	maxActive int
	maxKept   int
	signKeys  map[string][]byte // export link signing keys by id
	signKey   string            // the id that signs new links ("" when none is usable)

	storeTimeout, redisTimeout, identityTimeout time.Duration

	editWindow    time.Duration // 0: messages may be edited at any time
	mentionAllMax int           // >= 0; 0: @all mentions nobody
	directory     string        // DirectoryAll or DirectoryShared

	maxFileSize, fileQuota int64 // bytes, > 0

	pushAllow   []string // URL prefixes of push endpoints exempt from the address checks
	pushSubject string   // the VAPID sub claim; "" for the server's default

	warnings int // how many values Parse resolved to their safe side
}

type feature struct {
	mode   Mode
	window Window
	// hasWindow: a window was configured (or is required by the mode), so
	// Effective shows it.
	hasWindow bool
}

// Default returns the configuration `parley serve` runs on without a file:
// every documented default, the same as parsing "{}".
func Default() *Config {
	c := &Config{
		loc:             time.UTC,
		zoneOK:          true,
		limits:          map[string]Limit{},
		builtin:         DefaultRateLimits(),
		features:        map[string]feature{},
		perms:           map[string][]string{"admin": {"admin"}},
		switches:        map[string]bool{},
		retries:         DefaultExportRetries,
		backoff:         DefaultExportBackoff,
		keep:            DefaultExportKeep,
		maxActive:       DefaultExportMaxActive,
		maxKept:         DefaultExportMaxKept,
		signKeys:        map[string][]byte{},
		storeTimeout:    DefaultStoreTimeout,
		redisTimeout:    DefaultRedisTimeout,
		identityTimeout: DefaultIdentityTimeout,
		mentionAllMax:   DefaultMentionAllMax,
		directory:       DirectoryAll,
		maxFileSize:     DefaultMaxFileSize,
		fileQuota:       DefaultFileQuota,
	}
	for name, m := range defaultModes {
		c.features[name] = feature{mode: m}
	}
	return c
}

// Warnings is how many values of the file resolved to their safe side (a
// malformed rate-limit bucket turned off, an unknown key ignored, …): the
// number of warnings Parse returned. The server exports it as the
// parley_config_warnings gauge, so a mistake in a reloaded file shows on a
// dashboard and not only in the log.
func (c *Config) Warnings() int { return c.warnings }

// Location is the fixed zone access windows are read in. It is UTC when the
// file names none, and also when it names an unknown zone, in which case
// every window is outside (see Allowed).
func (c *Config) Location() *time.Location { return c.loc }

// TrustedProxies returns the proxies whose appended X-Forwarded-For hop is
// the client address; empty means the peer address is the client. Single
// addresses are returned as full-length prefixes. The slice is the
// caller's.
func (c *Config) TrustedProxies() []netip.Prefix { return slices.Clone(c.proxies) }

// DefaultRateLimits returns the built-in limits (a new map), in force when
// the file has no rate_limits key, or no file is given: per instance, per
// user (per client address for a caller not signed in), generous for a
// person and tight for a script. docs/configuration.md lists them with the
// reason for each.
func DefaultRateLimits() map[string]Limit {
	return map[string]Limit{
		"login":      {Limit: 30, Window: time.Minute},   // per address: a guessing script
		"ws_connect": {Limit: 60, Window: time.Minute},   // reconnect storms
		"convs":      {Limit: 60, Window: time.Minute},   // creating conversations, members
		"exports":    {Limit: 10, Window: time.Hour},     // each export reads a whole history
		"send":       {Limit: 600, Window: time.Minute},  // ten a second: far above typing
		"read":       {Limit: 3000, Window: time.Minute}, // sync, fetch, acks: clients are chatty
		"edit":       {Limit: 120, Window: time.Minute},
		"react":      {Limit: 300, Window: time.Minute},
		"dms":        {Limit: 60, Window: time.Minute},
		"users":      {Limit: 120, Window: time.Minute},
		"search":     {Limit: 120, Window: time.Minute}, // each search reads the text index
		"hooks":      {Limit: 120, Window: time.Minute}, // per address: one integration's pace
		"download":   {Limit: 60, Window: time.Minute},
		"files":      {Limit: 1200, Window: time.Minute}, // a conversation's images and thumbnails at once
		"upload":     {Limit: 600, Window: time.Minute},  // tus requests: a create, then HEADs and PATCHes of chunks
		"admin":      {Limit: 600, Window: time.Minute},
		"push":       {Limit: 60, Window: time.Minute}, // subscribing and notification levels: a person's clicks
	}
}

// RateLimit returns the limit of a route bucket: the file's value when it
// names the bucket (the zero Limit, off, when that value is bad), else the
// built-in default (off after rate_limits: {}).
func (c *Config) RateLimit(bucket string) Limit {
	if l, ok := c.limits[bucket]; ok {
		return l
	}
	return c.builtin[bucket]
}

// MetricsAllowed reports whether a client at addr may read /metrics on
// the public listener: a loopback address always, another only when the
// file's metrics.allow names it. An invalid address never.
func (c *Config) MetricsAllowed(addr netip.Addr) bool {
	if !addr.IsValid() {
		return false
	}
	addr = addr.Unmap().WithZone("")
	if addr.IsLoopback() {
		return true
	}
	for _, p := range c.metricsAllow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// RateLimitBuckets returns the buckets the file names under rate_limits,
// sorted (off ones included), so a caller can warn about names nothing
// uses.
func (c *Config) RateLimitBuckets() []string {
	return slices.Sorted(maps.Keys(c.limits))
}

// RedisURL returns the URL of the shared rate-limit store; "" means the
// local, per-instance store. It may hold a password: log Effective, never
// this.
func (c *Config) RedisURL() string { return c.redisURL }

// Access returns the access mode of a gated feature: the configured one,
// else the feature's documented default (OPEN for exports and webhooks),
// else CLOSED.
func (c *Config) Access(feature string) Mode {
	if f, ok := c.features[feature]; ok {
		return f.mode
	}
	return ModeClosed
}

// Window returns the access window of a feature. It is the zero Window
// (always outside) when none is configured, when it has a bad field, or when
// the configured time zone is unknown.
func (c *Config) Window(feature string) Window {
	if !c.zoneOK {
		return Window{}
	}
	return c.features[feature].window
}

// Allowed reports whether a gated feature may be used at now: always when
// OPEN, never when CLOSED, and when TEST_WINDOW only while now, read on the
// wall clock of Location, is inside the feature's window.
func (c *Config) Allowed(feature string, now time.Time) bool {
	switch c.Access(feature) {
	case ModeOpen:
		return true
	case ModeTestWindow:
		return c.Window(feature).Contains(now.In(c.loc))
	default:
		return false
	}
}

// Permit reports whether a permission rule allows role. A rule that does not
// exist, or whose configured value was bad, allows nobody.
func (c *Config) Permit(rule, role string) bool {
	return slices.Contains(c.perms[rule], role)
}

// Switch reports whether a new-flow switch is on; false (the old flow) when
// it is missing or not a boolean.
func (c *Config) Switch(name string) bool { return c.switches[name] }

// ExportRetries is how many times an export job retries a failed step
// (>= 0).
func (c *Config) ExportRetries() int { return c.retries }

// ExportBackoff is the pause between export retries (>= 0).
func (c *Config) ExportBackoff() time.Duration { return c.backoff }

// ExportKeep is how long a finished export's artifact is kept (> 0).
func (c *Config) ExportKeep() time.Duration { return c.keep }

// ExportMaxActive is how many queued or running export jobs one user may
// have (>= 1).
func (c *Config) ExportMaxActive() int { return c.maxActive }

// ExportMaxKept is how many live (done, not expired or revoked) artifacts
// one user keeps (>= 1): a new one expires the oldest.
func (c *Config) ExportMaxKept() int { return c.maxKept }

// SigningKeys returns the export link signing keys by id (a copy) and the
// id of the one that signs new links ("" when none is configured: the
// server then uses a key of its own data directory). Every key verifies, so
// a rotated-out key keeps its live links working until it is removed.
func (c *Config) SigningKeys() (keys map[string][]byte, current string) {
	keys = make(map[string][]byte, len(c.signKeys))
	for id, k := range c.signKeys {
		keys[id] = slices.Clone(k)
	}
	return keys, c.signKey
}

// StoreTimeout is the deadline of one store call (> 0).
func (c *Config) StoreTimeout() time.Duration { return c.storeTimeout }

// RedisTimeout is the deadline of one Redis call (> 0).
func (c *Config) RedisTimeout() time.Duration { return c.redisTimeout }

// IdentityTimeout is the deadline of one token lookup of the identify step
// (> 0): a slower identity layer leaves the caller anonymous (401).
func (c *Config) IdentityTimeout() time.Duration { return c.identityTimeout }

// EditWindow is how long after a message its sender may edit it, by the
// database clock; 0 (the default, and what a malformed value resolves to)
// means no limit.
func (c *Config) EditWindow() time.Duration { return c.editWindow }

// MentionAllMax is the largest conversation (members with an open period)
// in which @all mentions every member (>= 0; 0 turns @all off).
func (c *Config) MentionAllMax() int { return c.mentionAllMax }

// Directory is the directory policy: DirectoryAll or DirectoryShared.
func (c *Config) Directory() string { return c.directory }

// DirectoryShared reports whether the directory lists only users who share
// a conversation with the caller.
func (c *Config) DirectoryShared() bool { return c.directory == DirectoryShared }

// MaxFileSize is the largest file an upload may declare, in bytes (> 0).
func (c *Config) MaxFileSize() int64 { return c.maxFileSize }

// FileQuota is how many bytes one user's files (uploading and ready) may
// take together (> 0).
func (c *Config) FileQuota() int64 { return c.fileQuota }

// PushAllowEndpoints returns the URL prefixes (push.allow_endpoints) of
// push endpoints that skip the address checks: https is not required and
// internal addresses may be reached (an operator's own push relay, a test
// receiver on 127.0.0.1). The slice is the caller's.
func (c *Config) PushAllowEndpoints() []string { return slices.Clone(c.pushAllow) }

// PushSubject is the contact the server's push requests name (VAPID sub:
// a mailto: or https: URI); "" means the server's default.
func (c *Config) PushSubject() string { return c.pushSubject }

// Effective returns the configuration in force as plain JSON-able values
// (maps, slices, strings, numbers, booleans, nil), every key of the file
// schema with its resolved value, for the admin API. Durations are Go
// duration strings ("1m0s"). The Redis password is shown as "xxxxx".
// "timezone" is nil when the configured zone is unknown (every window is
// then outside); a window is {"valid": false} when it is always outside.
func (c *Config) Effective() map[string]any {
	zone := any(c.loc.String())
	if !c.zoneOK {
		zone = nil
	}
	proxies := []string{}
	for _, p := range c.proxies {
		proxies = append(proxies, p.String())
	}
	allow := []string{}
	for _, p := range c.metricsAllow {
		allow = append(allow, p.String())
	}
	limits := map[string]any{}
	for _, set := range []map[string]Limit{c.builtin, c.limits} {
		for name, l := range set {
			limits[name] = map[string]any{"limit": l.Limit, "window": l.Window.String()}
		}
	}
	access := map[string]any{}
	for name, f := range c.features {
		m := map[string]any{"mode": string(f.mode)}
		if f.hasWindow || f.mode == ModeTestWindow {
			m["window"] = c.Window(name).effective()
		}
		access[name] = m
	}
	perms := map[string]any{}
	for rule, roles := range c.perms {
		perms[rule] = slices.Clone(roles)
	}
	switches := map[string]any{}
	for name, on := range c.switches {
		switches[name] = on
	}
	return map[string]any{
		"timezone":         zone,
		"trusted_proxies":  proxies,
		"metrics":          map[string]any{"allow": allow},
		"rate_limits":      limits,
		"rate_limit_store": map[string]any{"redis": redactURL(c.redisURL)},
		"access":           access,
		"permissions":      perms,
		"switches":         switches,
		"export": map[string]any{
			"retries":      c.retries,
			"backoff":      c.backoff.String(),
			"keep":         c.keep.String(),
			"max_active":   c.maxActive,
			"max_kept":     c.maxKept,
			"signing_key":  c.signKey,
			"signing_keys": redactKeys(c.signKeys),
		},
		"timeouts": map[string]any{
			"store":    c.storeTimeout.String(),
			"redis":    c.redisTimeout.String(),
			"identity": c.identityTimeout.String(),
		},
		"edit_window":     c.editWindow.String(),
		"mention_all_max": c.mentionAllMax,
		"directory":       c.directory,
		"max_file_size":   c.maxFileSize,
		"file_quota":      c.fileQuota,
		"push":            map[string]any{"allow_endpoints": append([]string{}, c.pushAllow...), "subject": c.pushSubject},
	}
}

// Window is a weekly access window: the listed days, from a start time up to
// (not including) an end time, read on the wall clock of the time it is
// asked about. The zero Window, and any window built from a bad field, is
// never inside. Windows do not cross midnight (from must be before to).
type Window struct {
	days     [7]bool // by time.Weekday
	from, to int     // minutes after midnight; to may be 24:00
	valid    bool
}

// Valid reports whether w can ever be inside.
func (w Window) Valid() bool { return w.valid }

// Contains reports whether t, on its own wall clock, is inside w. Convert t
// to the configured zone first (Config.Allowed does).
func (w Window) Contains(t time.Time) bool {
	if !w.valid || !w.days[t.Weekday()] {
		return false
	}
	h, m, s := t.Clock()
	sec := h*3600 + m*60 + s
	return w.from*60 <= sec && sec < w.to*60
}

// dayNames are the day names of the file, in time.Weekday order.
var dayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

func (w Window) effective() map[string]any {
	if !w.valid {
		return map[string]any{"valid": false}
	}
	days := []string{}
	for i := range 7 {
		d := (i + 1) % 7 // mon first
		if w.days[d] {
			days = append(days, dayNames[d])
		}
	}
	return map[string]any{
		"valid": true,
		"days":  days,
		"from":  clock(w.from),
		"to":    clock(w.to),
	}
}

// clock formats minutes after midnight as HH:MM.
func clock(minutes int) string { return fmt.Sprintf("%02d:%02d", minutes/60, minutes%60) }

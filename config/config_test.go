package config_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/config"
)

// parse parses src, failing the test on an error.
func parse(t *testing.T, src string) (*config.Config, []string) {
	t.Helper()
	c, warns, err := config.Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return c, warns
}

func location(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

var (
	berlin = location("Europe/Berlin")
	// mondayNoon is inside every window the rows below call valid.
	mondayNoon = time.Date(2025, time.March, 3, 12, 0, 0, 0, berlin)
)

// window is an exports feature in TEST_WINDOW mode with the given window
// fields, read in Europe/Berlin.
func window(fields string) string {
	return "timezone: Europe/Berlin\naccess:\n  exports:\n    mode: TEST_WINDOW\n    window: {" + fields + "}\n"
}

const allDays = `days: [mon, tue, wed, thu, fri, sat, sun]`

func limit(bucket string) func(*config.Config) any {
	return func(c *config.Config) any { return c.RateLimit(bucket) }
}
func mode(feature string) func(*config.Config) any {
	return func(c *config.Config) any { return c.Access(feature) }
}
func allowedAt(feature string, now time.Time) func(*config.Config) any {
	return func(c *config.Config) any { return c.Allowed(feature, now) }
}
func permit(rule, role string) func(*config.Config) any {
	return func(c *config.Config) any { return c.Permit(rule, role) }
}
func switchOn(name string) func(*config.Config) any {
	return func(c *config.Config) any { return c.Switch(name) }
}
func proxies(c *config.Config) any   { return fmt.Sprint(c.TrustedProxies()) }
func redis(c *config.Config) any     { return c.RedisURL() }
func retries(c *config.Config) any   { return c.ExportRetries() }
func backoff(c *config.Config) any   { return c.ExportBackoff() }
func keep(c *config.Config) any      { return c.ExportKeep() }
func maxActive(c *config.Config) any { return c.ExportMaxActive() }
func maxKept(c *config.Config) any   { return c.ExportMaxKept() }
func signKey(c *config.Config) any {
	keys, cur := c.SigningKeys()
	return fmt.Sprintf("%s %d", cur, len(keys))
}

const secret32 = "0123456789abcdef0123456789abcdef"

func storeTimeout(c *config.Config) any   { return c.StoreTimeout() }
func redisTimeout(c *config.Config) any   { return c.RedisTimeout() }
func identTimeout(c *config.Config) any   { return c.IdentityTimeout() }
func zone(c *config.Config) any           { return c.Location().String() }
func sendLimit(c *config.Config) any      { return c.RateLimit("send") }
func exportsAllowed(c *config.Config) any { return c.Allowed("exports", mondayNoon) }
func editWindow(c *config.Config) any     { return c.EditWindow() }
func allMax(c *config.Config) any         { return c.MentionAllMax() }
func directory(c *config.Config) any      { return c.Directory() }
func maxFileSize(c *config.Config) any    { return c.MaxFileSize() }
func fileQuota(c *config.Config) any      { return c.FileQuota() }
func pushAllow(c *config.Config) any      { return c.PushAllowEndpoints() }
func pushSubject(c *config.Config) any    { return c.PushSubject() }

// failSafeRows are the resolution rules of the file schema, one per row:
// parsing yaml gives want from get, and a warning naming the key path warn
// ("" = no warning at all). FuzzParse seeds from them too.
var failSafeRows = []struct {
	name string
	yaml string
	get  func(*config.Config) any
	want any
	warn string
}{
	// timezone
	{"timezone missing is UTC", `{}`, zone, "UTC", ""},
	{"timezone named", `timezone: Europe/Berlin`, zone, "Europe/Berlin", ""},
	{"timezone unknown closes every window", "timezone: Mars/Olympus\naccess: {exports: {mode: TEST_WINDOW, window: {" + allDays + `, from: "00:00", to: "24:00"}}}`, exportsAllowed, false, "timezone"},
	{"timezone Local is not fixed", "timezone: Local\naccess: {exports: {mode: TEST_WINDOW, window: {" + allDays + `, from: "00:00", to: "24:00"}}}`, exportsAllowed, false, "timezone"},
	{"timezone not a string", `timezone: 5`, exportsAllowed, true, "timezone"}, // exports stays OPEN: windows only
	{"timezone blank", `timezone: ""`, zone, "UTC", "timezone"},

	// trusted_proxies
	{"proxies missing: none", `{}`, proxies, "[]", ""},
	{"proxies CIDR and address", `trusted_proxies: [10.0.0.0/8, 192.168.1.7, "::ffff:10.1.1.1", "2001:db8::/32"]`, proxies, "[10.0.0.0/8 192.168.1.7/32 10.1.1.1/32 2001:db8::/32]", ""},
	{"proxy malformed entry dropped", `trusted_proxies: [10.0.0.0/8, not-an-ip]`, proxies, "[10.0.0.0/8]", "trusted_proxies[1]"},
	{"proxy host bits set dropped", `trusted_proxies: [10.1.2.3/8]`, proxies, "[]", "trusted_proxies[0]"},
	{"proxy with zone dropped", `trusted_proxies: ["fe80::1%eth0"]`, proxies, "[]", "trusted_proxies[0]"},
	{"proxy not a string dropped", `trusted_proxies: [7, {a: b}]`, proxies, "[]", "trusted_proxies[0]"},
	{"proxies not a list: none", `trusted_proxies: 10.0.0.0/8`, proxies, "[]", "trusted_proxies"},
	{"proxy trusting everyone kept, warned", `trusted_proxies: [0.0.0.0/0]`, proxies, "[0.0.0.0/0]", "trusted_proxies[0]"},

	// rate_limits
	{"rate limits missing: the built-in default", `{}`, sendLimit, config.Limit{Limit: 600, Window: time.Minute}, ""},
	{"rate limit missing bucket keeps its default", `rate_limits: {login: {limit: 5}}`, sendLimit, config.Limit{Limit: 600, Window: time.Minute}, ""},
	{"rate limits empty: all off", `rate_limits: {}`, sendLimit, config.Limit{}, ""},
	{"rate limits null: all off", `rate_limits:`, sendLimit, config.Limit{}, ""},
	{"rate limits not a mapping: all off", `rate_limits: [send]`, sendLimit, config.Limit{}, "rate_limits"},
	{"rate limit malformed bucket is off, not its default", `rate_limits: {send: 5}`, sendLimit, config.Limit{}, "rate_limits.send"},
	{"rate limit bad bucket leaves the others' defaults", `rate_limits: {login: 5}`, sendLimit, config.Limit{Limit: 600, Window: time.Minute}, "rate_limits.login"},
	{"rate limit set", `rate_limits: {send: {limit: 60, window: 30s}}`, sendLimit, config.Limit{Limit: 60, Window: 30 * time.Second}, ""},
	{"rate limit window missing is 1m", `rate_limits: {send: {limit: 5}}`, sendLimit, config.Limit{Limit: 5, Window: time.Minute}, ""},
	{"rate limit 0 is off", `rate_limits: {send: {limit: 0, window: 1m}}`, sendLimit, config.Limit{}, ""},
	{"rate limit missing is off", `rate_limits: {send: {window: 1m}}`, sendLimit, config.Limit{}, "rate_limits.send"},
	{"rate limit null is off", `rate_limits: {send: {limit: , window: 1m}}`, sendLimit, config.Limit{}, "rate_limits.send"},
	{"rate limit negative is off", `rate_limits: {send: {limit: -5}}`, sendLimit, config.Limit{}, "rate_limits.send.limit"},
	{"rate limit ten is off", `rate_limits: {send: {limit: ten}}`, sendLimit, config.Limit{}, "rate_limits.send.limit"},
	{"rate limit quoted number is off", `rate_limits: {send: {limit: "60"}}`, sendLimit, config.Limit{}, "rate_limits.send.limit"},
	{"rate limit fraction is off", `rate_limits: {send: {limit: 1.5}}`, sendLimit, config.Limit{}, "rate_limits.send.limit"},
	{"rate limit window malformed is off", `rate_limits: {send: {limit: 5, window: fast}}`, sendLimit, config.Limit{}, "rate_limits.send.window"},
	{"rate limit window without unit is off", `rate_limits: {send: {limit: 5, window: 60}}`, sendLimit, config.Limit{}, "rate_limits.send.window"},
	{"rate limit window zero is off", `rate_limits: {send: {limit: 5, window: 0s}}`, sendLimit, config.Limit{}, "rate_limits.send.window"},
	{"rate limit window negative is off", `rate_limits: {send: {limit: 5, window: -1m}}`, sendLimit, config.Limit{}, "rate_limits.send.window"},
	{"rate limit bucket not a mapping is off", `rate_limits: {send: 60}`, sendLimit, config.Limit{}, "rate_limits.send"},
	{"rate limits not a mapping: all off", `rate_limits: [send]`, sendLimit, config.Limit{}, "rate_limits"},
	{"rate limit unknown key warned, rest kept", `rate_limits: {send: {limit: 5, windw: 10s}}`, sendLimit, config.Limit{Limit: 5, Window: time.Minute}, "rate_limits.send.windw"},
	{"rate limit free-form bucket name", `rate_limits: {ws_send: {limit: 3, window: 1s}}`, limit("ws_send"), config.Limit{Limit: 3, Window: time.Second}, ""},

	// rate_limit_store
	{"redis missing is local", `{}`, redis, "", ""},
	{"redis URL", `rate_limit_store: {redis: "redis://127.0.0.1:6379/0"}`, redis, "redis://127.0.0.1:6379/0", ""},
	{"rediss URL with password", `rate_limit_store: {redis: "rediss://:pw@cache.internal:6380"}`, redis, "rediss://:pw@cache.internal:6380", ""},
	{"redis scheme in upper case", `rate_limit_store: {redis: "REDIS://h"}`, redis, "redis://h", ""},
	{"redis blank is local", `rate_limit_store: {redis: " "}`, redis, "", ""},
	{"redis wrong scheme is local", `rate_limit_store: {redis: "http://127.0.0.1:6379"}`, redis, "", "rate_limit_store.redis"},
	{"redis no host is local", `rate_limit_store: {redis: "redis://"}`, redis, "", "rate_limit_store.redis"},
	{"redis unparsable is local", `rate_limit_store: {redis: "redis://[::1"}`, redis, "", "rate_limit_store.redis"},
	{"redis bad port is local", `rate_limit_store: {redis: "redis://h:port"}`, redis, "", "rate_limit_store.redis"},
	{"redis bad db is local", `rate_limit_store: {redis: "redis://h:6379/zero"}`, redis, "", "rate_limit_store.redis"},
	{"redis not a string is local", `rate_limit_store: {redis: 6379}`, redis, "", "rate_limit_store.redis"},
	{"redis store not a mapping is local", `rate_limit_store: "redis://h"`, redis, "", "rate_limit_store"},

	// access modes
	{"exports missing is OPEN", `{}`, mode("exports"), config.ModeOpen, ""},
	{"webhooks missing is OPEN", `{}`, mode("webhooks"), config.ModeOpen, ""},
	{"mode missing is the default", `access: {exports: {}}`, mode("exports"), config.ModeOpen, ""},
	{"mode null is the default", `access: {webhooks: {mode: }}`, mode("webhooks"), config.ModeOpen, ""},
	{"mode blank is the default", `access: {exports: {mode: "  "}}`, mode("exports"), config.ModeOpen, ""},
	{"feature null is the default", `access: {exports: }`, mode("exports"), config.ModeOpen, ""},
	{"unknown feature not in file is CLOSED", `{}`, mode("search"), config.ModeClosed, ""},
	{"unknown feature without mode is CLOSED", `access: {search: {}}`, mode("search"), config.ModeClosed, ""},
	{"unknown feature with mode", `access: {search: {mode: OPEN}}`, mode("search"), config.ModeOpen, ""},
	{"mode open lower case is OPEN", `access: {exports: {mode: open}}`, mode("exports"), config.ModeOpen, ""},
	{"mode trimmed mixed case", `access: {exports: {mode: " Test_Window "}}`, mode("exports"), config.ModeTestWindow, "access.exports"}, // no window
	{"mode closed", `access: {exports: {mode: closed}}`, allowedAt("exports", mondayNoon), false, ""},
	{"mode OPNE is CLOSED", `access: {exports: {mode: OPNE}}`, mode("exports"), config.ModeClosed, "access.exports.mode"},
	{"mode yes is CLOSED", `access: {exports: {mode: yes}}`, mode("exports"), config.ModeClosed, "access.exports.mode"},
	{"mode true is CLOSED", `access: {exports: {mode: true}}`, mode("exports"), config.ModeClosed, "access.exports.mode"},
	{"mode number is CLOSED", `access: {webhooks: {mode: 1}}`, mode("webhooks"), config.ModeClosed, "access.webhooks.mode"},
	{"mode list is CLOSED", `access: {webhooks: {mode: [OPEN]}}`, mode("webhooks"), config.ModeClosed, "access.webhooks.mode"},
	{"feature not a mapping is CLOSED", `access: {exports: OPEN}`, mode("exports"), config.ModeClosed, "access.exports"},
	{"access not a mapping closes known features", `access: [exports]`, mode("webhooks"), config.ModeClosed, "access"},
	{"OPEN is allowed", `access: {exports: {mode: OPEN}}`, exportsAllowed, true, ""},
	{"window without mode warned, default applies", "access: {exports: {window: {" + allDays + `, from: "09:00", to: "10:00"}}}`, exportsAllowed, true, "access.exports"},

	// access windows (mondayNoon is inside all of them when valid)
	{"window valid is inside", window(`days: [mon], from: "09:00", to: "18:00"`), exportsAllowed, true, ""},
	{"window times unquoted", window(`days: [mon], from: 09:00, to: 18:00`), exportsAllowed, true, ""},
	{"window days case-insensitive", window(`days: [MON, " Tue "], from: "09:00", to: "18:00"`), exportsAllowed, true, ""},
	{"window to 24:00", window(`days: [mon], from: "00:00", to: "24:00"`), exportsAllowed, true, ""},
	{"window missing is outside", "access: {exports: {mode: TEST_WINDOW}}", exportsAllowed, false, "access.exports"},
	{"window days missing is outside", window(`from: "09:00", to: "18:00"`), exportsAllowed, false, "access.exports.window"},
	{"window from missing is outside", window(`days: [mon], to: "18:00"`), exportsAllowed, false, "access.exports.window"},
	{"window to missing is outside", window(`days: [mon], from: "09:00"`), exportsAllowed, false, "access.exports.window"},
	{"window days empty is outside", window(`days: [], from: "09:00", to: "18:00"`), exportsAllowed, false, "access.exports.window.days"},
	{"window days not a list is outside", window(`days: mon, from: "09:00", to: "18:00"`), exportsAllowed, false, "access.exports.window.days"},
	{"window bad day is outside", window(`days: [mon, funday], from: "09:00", to: "18:00"`), exportsAllowed, false, "access.exports.window.days[1]"},
	{"window day range is outside", window(`days: [mon-fri], from: "09:00", to: "18:00"`), exportsAllowed, false, "access.exports.window.days[0]"},
	{"window from one digit hour is outside", window(`days: [mon], from: "9:00", to: "18:00"`), exportsAllowed, false, "access.exports.window.from"},
	{"window from 25:00 is outside", window(`days: [mon], from: "25:00", to: "26:00"`), exportsAllowed, false, "access.exports.window.from"},
	{"window from 24:00 is outside", window(`days: [mon], from: "24:00", to: "24:00"`), exportsAllowed, false, "access.exports.window.from"},
	{"window to 18:60 is outside", window(`days: [mon], from: "09:00", to: "18:60"`), exportsAllowed, false, "access.exports.window.to"},
	{"window time not a string is outside", window(`days: [mon], from: 900, to: "18:00"`), exportsAllowed, false, "access.exports.window.from"},
	{"window from after to is outside", window(`days: [mon], from: "18:00", to: "09:00"`), exportsAllowed, false, "access.exports.window"},
	{"window from equals to is outside", window(`days: [mon], from: "12:00", to: "12:00"`), exportsAllowed, false, "access.exports.window"},
	{"window not a mapping is outside", "access: {exports: {mode: TEST_WINDOW, window: always}}", exportsAllowed, false, "access.exports.window"},
	{"window unknown key warned", window(`days: [mon], from: "09:00", to: "18:00", zone: UTC`), exportsAllowed, true, "access.exports.window.zone"},
	{"window other day is outside", window(`days: [tue], from: "09:00", to: "18:00"`), exportsAllowed, false, ""},

	// permissions
	{"default admin rule allows admin", `{}`, permit("admin", "admin"), true, ""},
	{"default admin rule denies user", `{}`, permit("admin", "user"), false, ""},
	{"missing rule denies", `{}`, permit("export_all", "admin"), false, ""},
	{"rule override", `permissions: {admin: [admin, user]}`, permit("admin", "user"), true, ""},
	{"new rule", `permissions: {audit: [User]}`, permit("audit", "user"), true, ""},
	{"other rules keep the default", `permissions: {audit: [user]}`, permit("admin", "admin"), true, ""},
	{"empty rule denies", `permissions: {admin: []}`, permit("admin", "admin"), false, ""},
	{"rule not a list denies", `permissions: {admin: admin}`, permit("admin", "admin"), false, "permissions.admin"},
	{"rule null denies", `permissions: {admin: }`, permit("admin", "admin"), false, "permissions.admin"},
	{"rule unknown role denies all", `permissions: {admin: [admin, root]}`, permit("admin", "admin"), false, "permissions.admin[1]"},
	{"rule non-string role denies all", `permissions: {admin: [admin, 1]}`, permit("admin", "admin"), false, "permissions.admin[1]"},
	{"permissions not a mapping deny all", `permissions: [admin]`, permit("admin", "admin"), false, "permissions"},
	{"role is compared exactly", `{}`, permit("admin", "Admin"), false, ""},

	// switches
	{"switch missing is off", `{}`, switchOn("shared_rate_limit"), false, ""},
	{"switch true", `switches: {shared_rate_limit: true}`, switchOn("shared_rate_limit"), true, ""},
	{"switch null is off", `switches: {shared_rate_limit: }`, switchOn("shared_rate_limit"), false, ""},
	{"switch quoted true is off", `switches: {shared_rate_limit: "true"}`, switchOn("shared_rate_limit"), false, "switches.shared_rate_limit"},
	{"switch yes is off", `switches: {shared_rate_limit: yes}`, switchOn("shared_rate_limit"), false, "switches.shared_rate_limit"},
	{"switch 1 is off", `switches: {shared_rate_limit: 1}`, switchOn("shared_rate_limit"), false, "switches.shared_rate_limit"},
	{"switches not a mapping are off", `switches: [shared_rate_limit]`, switchOn("shared_rate_limit"), false, "switches"},

	// export
	{"retries missing is 3", `{}`, retries, 3, ""},
	{"retries set", `export: {retries: 5}`, retries, 5, ""},
	{"retries zero", `export: {retries: 0}`, retries, 0, ""},
	{"retries negative clamps to 0", `export: {retries: -2}`, retries, 0, "export.retries"},
	{"retries malformed is 3", `export: {retries: three}`, retries, 3, "export.retries"},
	{"retries fraction is 3", `export: {retries: 1.5}`, retries, 3, "export.retries"},
	{"keep missing is 7 days", `{}`, keep, config.DefaultExportKeep, ""},
	{"keep set", `export: {keep: 24h}`, keep, 24 * time.Hour, ""},
	{"keep zero is the default", `export: {keep: 0}`, keep, config.DefaultExportKeep, "export.keep"},
	{"keep malformed is the default", `export: {keep: week}`, keep, config.DefaultExportKeep, "export.keep"},
	{"max_active missing is 2", `{}`, maxActive, 2, ""},
	{"max_active set", `export: {max_active: 5}`, maxActive, 5, ""},
	{"max_active zero clamps to 1", `export: {max_active: 0}`, maxActive, 1, "export.max_active"},
	{"max_active malformed is 2", `export: {max_active: many}`, maxActive, 2, "export.max_active"},
	{"max_kept missing is 10", `{}`, maxKept, 10, ""},
	{"max_kept set", `export: {max_kept: 3}`, maxKept, 3, ""},
	{"max_kept one", `export: {max_kept: 1}`, maxKept, 1, ""},
	{"max_kept zero is the default", `export: {max_kept: 0}`, maxKept, 10, "export.max_kept"},
	{"max_kept negative is the default", `export: {max_kept: -4}`, maxKept, 10, "export.max_kept"},
	{"max_kept malformed is the default", `export: {max_kept: lots}`, maxKept, 10, "export.max_kept"},
	{"max_kept fraction is the default", `export: {max_kept: 2.5}`, maxKept, 10, "export.max_kept"},
	{"max_kept quoted is the default", `export: {max_kept: "3"}`, maxKept, 10, "export.max_kept"},
	{"signing key used", `export: {signing_key: k2, signing_keys: {k1: "` + secret32 + `", k2: "` + secret32 + `x"}}`, signKey, "k2 2", ""},
	{"signing key missing from the ring", `export: {signing_key: k3, signing_keys: {k1: "` + secret32 + `"}}`, signKey, " 1", "export.signing_key"},
	{"short signing secret dropped", `export: {signing_key: k1, signing_keys: {k1: "short"}}`, signKey, " 0", "export.signing_keys.k1"},
	{"bad key id dropped", `export: {signing_keys: {"k 1": "` + secret32 + `"}}`, signKey, " 0", "export.signing_keys.\"k 1\""},
	{"backoff missing is 1s", `{}`, backoff, time.Second, ""},
	{"backoff set", `export: {backoff: 250ms}`, backoff, 250 * time.Millisecond, ""},
	{"backoff zero", `export: {backoff: 0}`, backoff, time.Duration(0), ""},
	{"backoff negative clamps to 0", `export: {backoff: -1s}`, backoff, time.Duration(0), "export.backoff"},
	{"backoff malformed is 1s", `export: {backoff: soon}`, backoff, time.Second, "export.backoff"},
	{"backoff without unit is 1s", `export: {backoff: 5}`, backoff, time.Second, "export.backoff"},
	{"export not a mapping is defaults", `export: 3`, retries, 3, "export"},

	// timeouts
	{"store timeout missing is 10s", `{}`, storeTimeout, 10 * time.Second, ""},
	{"store timeout set", `timeouts: {store: 3s}`, storeTimeout, 3 * time.Second, ""},
	{"store timeout zero is 10s", `timeouts: {store: 0}`, storeTimeout, 10 * time.Second, "timeouts.store"},
	{"store timeout negative is 10s", `timeouts: {store: -1s}`, storeTimeout, 10 * time.Second, "timeouts.store"},
	{"store timeout malformed is 10s", `timeouts: {store: forever}`, storeTimeout, 10 * time.Second, "timeouts.store"},
	{"redis timeout missing is 200ms", `{}`, redisTimeout, 200 * time.Millisecond, ""},
	{"redis timeout set", `timeouts: {redis: 50ms}`, redisTimeout, 50 * time.Millisecond, ""},
	{"redis timeout zero is 200ms", `timeouts: {redis: 0s}`, redisTimeout, 200 * time.Millisecond, "timeouts.redis"},
	{"redis timeout malformed is 200ms", `timeouts: {redis: [1s]}`, redisTimeout, 200 * time.Millisecond, "timeouts.redis"},
	{"identity timeout missing is 2s", `{}`, identTimeout, 2 * time.Second, ""},
	{"identity timeout negative is 2s", `timeouts: {identity: -5s}`, identTimeout, 2 * time.Second, "timeouts.identity"},
	{"identity timeout malformed is 2s", `timeouts: {identity: "2 seconds"}`, identTimeout, 2 * time.Second, "timeouts.identity"},
	{"timeouts not a mapping are defaults", `timeouts: 5s`, storeTimeout, 10 * time.Second, "timeouts"},

	// unknown keys
	{"unknown top-level key", "ratelimits: {send: {limit: 5}}", sendLimit, config.Limit{Limit: 600, Window: time.Minute}, "ratelimits"},
	// edits, mentions, the directory
	{"edit window missing is none", `{}`, editWindow, time.Duration(0), ""},
	{"edit window set", `edit_window: 15m`, editWindow, 15 * time.Minute, ""},
	{"edit window null is none", `edit_window:`, editWindow, time.Duration(0), ""},
	{"edit window malformed is none", `edit_window: soon`, editWindow, time.Duration(0), "edit_window"},
	{"edit window negative is none", `edit_window: -1m`, editWindow, time.Duration(0), "edit_window"},
	{"edit window a list is none", `edit_window: [1m]`, editWindow, time.Duration(0), "edit_window"},
	{"mention_all_max missing is 50", `{}`, allMax, 50, ""},
	{"mention_all_max set", `mention_all_max: 8`, allMax, 8, ""},
	{"mention_all_max zero is off", `mention_all_max: 0`, allMax, 0, ""},
	{"mention_all_max negative clamps to 0", `mention_all_max: -3`, allMax, 0, "mention_all_max"},
	{"mention_all_max malformed is 50", `mention_all_max: many`, allMax, 50, "mention_all_max"},
	{"mention_all_max quoted is 50", `mention_all_max: "10"`, allMax, 50, "mention_all_max"},
	{"directory missing is all", `{}`, directory, "all", ""},
	{"directory shared", `directory: shared`, directory, "shared", ""},
	{"directory case-insensitive", `directory: ALL`, directory, "all", ""},
	{"directory unknown is shared", `directory: everyone`, directory, "shared", "directory"},
	{"directory not text is shared", `directory: {all: true}`, directory, "shared", "directory"},
	// file limits
	{"max_file_size missing is 100 MiB", `{}`, maxFileSize, int64(100 << 20), ""},
	{"max_file_size bytes", `max_file_size: 1000`, maxFileSize, int64(1000), ""},
	{"max_file_size with a unit", `max_file_size: 5MiB`, maxFileSize, int64(5 << 20), ""},
	{"max_file_size unit spaced, any case", `max_file_size: "2 gib"`, maxFileSize, int64(2 << 30), ""},
	{"max_file_size zero is the default", `max_file_size: 0`, maxFileSize, int64(100 << 20), "max_file_size"},
	{"max_file_size negative is the default", `max_file_size: -5`, maxFileSize, int64(100 << 20), "max_file_size"},
	{"max_file_size unknown unit is the default", `max_file_size: 5MB`, maxFileSize, int64(100 << 20), "max_file_size"},
	{"max_file_size overflow is the default", `max_file_size: 99999999TiB`, maxFileSize, int64(100 << 20), "max_file_size"},
	{"file_quota missing is 10 GiB", `{}`, fileQuota, int64(10 << 30), ""},
	{"file_quota set", `file_quota: 1GiB`, fileQuota, int64(1 << 30), ""},
	{"file_quota malformed is the default", `file_quota: [1]`, fileQuota, int64(10 << 30), "file_quota"},
	// push
	{"push.allow_endpoints missing is none", `{}`, pushAllow, []string(nil), ""},
	{"push.allow_endpoints prefixes", `push: {allow_endpoints: ["http://127.0.0.1:", "https://relay.internal/"]}`, pushAllow, []string{"http://127.0.0.1:", "https://relay.internal/"}, ""},
	{"push.allow_endpoints no host is dropped", `push: {allow_endpoints: ["https://", "http://127.0.0.1:"]}`, pushAllow, []string{"http://127.0.0.1:"}, "push.allow_endpoints[0]"},
	{"push.allow_endpoints port only is dropped", `push: {allow_endpoints: ["http://:80"]}`, pushAllow, []string(nil), "push.allow_endpoints[0]"},
	{"push.allow_endpoints other scheme is dropped", `push: {allow_endpoints: ["ftp://x", 127.0.0.1]}`, pushAllow, []string(nil), "push.allow_endpoints[1]"},
	{"push.allow_endpoints space is dropped", `push: {allow_endpoints: ["https://a b/"]}`, pushAllow, []string(nil), "push.allow_endpoints[0]"},
	{"push.allow_endpoints not a list is none", `push: {allow_endpoints: "http://127.0.0.1:"}`, pushAllow, []string(nil), "push.allow_endpoints"},
	{"push not a mapping is none", `push: [1]`, pushAllow, []string(nil), "push"},
	{"push.subject mailto", `push: {subject: "mailto:ops@example.com"}`, pushSubject, "mailto:ops@example.com", ""},
	{"push.subject https", `push: {subject: "https://chat.example.com/contact"}`, pushSubject, "https://chat.example.com/contact", ""},
	{"push.subject other is the default", `push: {subject: "ops@example.com"}`, pushSubject, "", "push.subject"},
	{"push unknown key", `push: {allow: ["http://127.0.0.1:"]}`, pushAllow, []string(nil), "push.allow"},
	{"unknown timeouts key", "timeouts: {db: 1s}", storeTimeout, 10 * time.Second, "timeouts.db"},
	{"unknown feature key", "access: {exports: {mod: CLOSED}}", mode("exports"), config.ModeOpen, "access.exports.mod"},
}

// TestFailSafeDefaults proves every resolution rule of the file schema: a
// missing value takes its documented default, a malformed one its safe side
// with a warning that names the key path, and Parse never fails for either.
func TestFailSafeDefaults(t *testing.T) {
	for _, tc := range failSafeRows {
		t.Run(tc.name, func(t *testing.T) {
			c, warns := parse(t, tc.yaml)
			if got := tc.get(c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v (%T), want %v (%T)", got, got, tc.want, tc.want)
			}
			checkWarning(t, warns, tc.warn)
		})
	}
}

// checkWarning checks that warns is empty when path is "", and otherwise
// holds a warning about path.
func checkWarning(t *testing.T, warns []string, path string) {
	t.Helper()
	if path == "" {
		if len(warns) != 0 {
			t.Errorf("warnings %q, want none", warns)
		}
		return
	}
	for _, w := range warns {
		if strings.HasPrefix(w, path+" (line ") {
			return
		}
	}
	t.Errorf("warnings %q, want one about %s", warns, path)
}

// TestWindowFixedZone proves access windows are read on the wall clock of
// the configured zone, whatever the zone of the time asked about, and across
// daylight saving time.
func TestWindowFixedZone(t *testing.T) {
	const src = `
timezone: Europe/Berlin
access:
  exports: {mode: TEST_WINDOW, window: {days: [mon, tue, wed, thu, fri], from: "10:00", to: "18:00"}}
  webhooks: {mode: TEST_WINDOW, window: {days: [mon], from: "00:00", to: "01:00"}}
`
	c, warns := parse(t, src)
	checkWarning(t, warns, "")
	utc := func(month time.Month, day, h, m, s int) time.Time {
		return time.Date(2025, month, day, h, m, s, 0, time.UTC)
	}
	tokyo := location("Asia/Tokyo")
	for _, tc := range []struct {
		name    string
		feature string
		now     time.Time
		want    bool
	}{
		{"09:00 UTC is 10:00 in Berlin (winter)", "exports", utc(time.January, 6, 9, 0, 0), true},
		{"08:59:59 UTC is before 10:00 in Berlin", "exports", utc(time.January, 6, 8, 59, 59), false},
		{"16:59:59 UTC is inside in winter", "exports", utc(time.January, 6, 16, 59, 59), true},
		{"17:00 UTC is 18:00 in Berlin: to is outside", "exports", utc(time.January, 6, 17, 0, 0), false},
		{"08:00 UTC is 10:00 in Berlin (summer)", "exports", utc(time.July, 7, 8, 0, 0), true},
		{"16:30 UTC is 18:30 in Berlin (summer)", "exports", utc(time.July, 7, 16, 30, 0), false},
		{"Friday 15:00 UTC is inside", "exports", utc(time.January, 10, 15, 0, 0), true},
		{"Saturday is outside", "exports", utc(time.January, 11, 12, 0, 0), false},
		{"the zone of now does not matter", "exports", utc(time.January, 6, 9, 0, 0).In(tokyo), true},
		{"Sunday 23:30 UTC is Monday 00:30 in Berlin", "webhooks", utc(time.January, 5, 23, 30, 0), true},
		{"Monday 00:30 UTC is 01:30 in Berlin", "webhooks", utc(time.January, 6, 0, 30, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Allowed(tc.feature, tc.now); got != tc.want {
				t.Errorf("Allowed(%s, %v) = %v, want %v", tc.feature, tc.now, got, tc.want)
			}
		})
	}

	// The same window in UTC: 09:00 UTC is before 10:00.
	c, _ = parse(t, strings.Replace(src, "Europe/Berlin", "UTC", 1))
	if c.Allowed("exports", utc(time.January, 6, 9, 0, 0)) {
		t.Error("timezone UTC: 09:00 UTC is inside 10:00-18:00")
	}
}

// TestExampleFile proves the documented example (linked from the README)
// parses without a single warning and means what its comments say.
func TestExampleFile(t *testing.T) {
	c, warns, err := config.Load(filepath.Join("testdata", "parley.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	checkWarning(t, warns, "")
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"timezone", c.Location().String(), "Europe/Berlin"},
		{"trusted_proxies", fmt.Sprint(c.TrustedProxies()), "[10.0.0.0/8 192.168.1.7/32]"},
		{"send", c.RateLimit("send"), config.Limit{Limit: 60, Window: time.Minute}},
		{"login", c.RateLimit("login"), config.Limit{Limit: 10, Window: 5 * time.Minute}},
		{"convs", c.RateLimit("convs"), config.Limit{Limit: 30, Window: time.Minute}},
		{"admin off", c.RateLimit("admin"), config.Limit{}},
		{"redis", c.RedisURL(), "redis://127.0.0.1:6379/0"},
		{"exports", c.Access("exports"), config.ModeTestWindow},
		{"exports monday noon", c.Allowed("exports", mondayNoon), true},
		{"webhooks", c.Access("webhooks"), config.ModeOpen},
		{"admin rule", c.Permit("admin", "admin"), true},
		{"switch", c.Switch("shared_rate_limit"), true},
		{"retries", c.ExportRetries(), 3},
		{"backoff", c.ExportBackoff(), time.Second},
		{"store", c.StoreTimeout(), 10 * time.Second},
		{"redis timeout", c.RedisTimeout(), 200 * time.Millisecond},
		{"identity", c.IdentityTimeout(), 2 * time.Second},
		{"edit_window", c.EditWindow(), 15 * time.Minute},
		{"mention_all_max", c.MentionAllMax(), 50},
		{"directory", c.Directory(), "all"},
		{"max_file_size", c.MaxFileSize(), int64(100 << 20)},
		{"file_quota", c.FileQuota(), int64(10 << 30)},
		{"push.allow_endpoints", c.PushAllowEndpoints(), []string{"https://push-relay.internal.example/"}},
		{"push.subject", c.PushSubject(), "mailto:ops@example.com"},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// Every top-level key of the schema is in the example.
	data, err := os.ReadFile(filepath.Join("testdata", "parley.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for key := range c.Effective() {
		if !strings.Contains(string(data), "\n"+key+":") {
			t.Errorf("the example lacks the key %s", key)
		}
	}
}

// TestDefault proves Default is what an all-defaults file ("{}") resolves
// to, and that Effective shows every key of it.
func TestDefault(t *testing.T) {
	c, _ := parse(t, "{}")
	got, want := jsonOf(t, config.Default().Effective()), jsonOf(t, c.Effective())
	if got != want {
		t.Errorf("Default().Effective() = %s, want %s", got, want)
	}
	const wantJSON = `{"access":{"exports":{"mode":"OPEN"},"webhooks":{"mode":"OPEN"}},"directory":"all","edit_window":"0s",` +
		`"export":{"backoff":"1s","keep":"168h0m0s","max_active":2,"max_kept":10,"retries":3,"signing_key":"","signing_keys":{}},"file_quota":10737418240,"max_file_size":104857600,"mention_all_max":50,"metrics":{"allow":[]},"permissions":{"admin":["admin"]},` +
		`"push":{"allow_endpoints":[],"subject":""},` +
		`"rate_limit_store":{"redis":""},` +
		`"rate_limits":{"admin":{"limit":600,"window":"1m0s"},"convs":{"limit":60,"window":"1m0s"},"dms":{"limit":60,"window":"1m0s"},"download":{"limit":60,"window":"1m0s"},"edit":{"limit":120,"window":"1m0s"},"exports":{"limit":10,"window":"1h0m0s"},"files":{"limit":1200,"window":"1m0s"},"hooks":{"limit":120,"window":"1m0s"},"login":{"limit":30,"window":"1m0s"},"push":{"limit":60,"window":"1m0s"},"react":{"limit":300,"window":"1m0s"},"read":{"limit":3000,"window":"1m0s"},"search":{"limit":120,"window":"1m0s"},"send":{"limit":600,"window":"1m0s"},"upload":{"limit":600,"window":"1m0s"},"users":{"limit":120,"window":"1m0s"},"ws_connect":{"limit":60,"window":"1m0s"}},` +
		`"switches":{},` +
		`"timeouts":{"identity":"2s","redis":"200ms","store":"10s"},"timezone":"UTC","trusted_proxies":[]}`
	if got != wantJSON {
		t.Errorf("Default().Effective() = %s, want %s", got, wantJSON)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEffective proves the admin view shows resolved values, hides the
// Redis password, and is a copy.
func TestEffective(t *testing.T) {
	c, _ := parse(t, `
timezone: Mars/Olympus
trusted_proxies: [10.0.0.0/8, bad]
rate_limits: {send: {limit: 5, window: 10s}, login: {limit: ten}}
rate_limit_store: {redis: "redis://default:s3cret@cache:6379/2?password=s3cret"}
access:
  exports: {mode: TEST_WINDOW, window: {days: [fri, mon], from: "09:00", to: "24:00"}}
  webhooks: {mode: nope}
permissions: {admin: [admin, user], audit: [root]}
switches: {a: true, b: "yes"}
export: {retries: -1, backoff: 2s}
timeouts: {store: 0}
edit_window: 10m
mention_all_max: -1
directory: friends
`)
	eff := c.Effective()
	got := jsonOf(t, eff)
	want := `{"access":{"exports":{"mode":"TEST_WINDOW","window":{"valid":false}},"webhooks":{"mode":"CLOSED"}},"directory":"shared","edit_window":"10m0s",` +
		`"export":{"backoff":"2s","keep":"168h0m0s","max_active":2,"max_kept":10,"retries":0,"signing_key":"","signing_keys":{}},"file_quota":10737418240,"max_file_size":104857600,"mention_all_max":0,"metrics":{"allow":[]},"permissions":{"admin":["admin","user"],"audit":[]},"push":{"allow_endpoints":[],"subject":""},` +
		`"rate_limit_store":{"redis":"redis://default:xxxxx@cache:6379/2?password=xxxxx"},` +
		`"rate_limits":{"admin":{"limit":600,"window":"1m0s"},"convs":{"limit":60,"window":"1m0s"},"dms":{"limit":60,"window":"1m0s"},"download":{"limit":60,"window":"1m0s"},"edit":{"limit":120,"window":"1m0s"},"exports":{"limit":10,"window":"1h0m0s"},"files":{"limit":1200,"window":"1m0s"},"hooks":{"limit":120,"window":"1m0s"},"login":{"limit":0,"window":"0s"},"push":{"limit":60,"window":"1m0s"},"react":{"limit":300,"window":"1m0s"},"read":{"limit":3000,"window":"1m0s"},"search":{"limit":120,"window":"1m0s"},"send":{"limit":5,"window":"10s"},"upload":{"limit":600,"window":"1m0s"},"users":{"limit":120,"window":"1m0s"},"ws_connect":{"limit":60,"window":"1m0s"}},` +
		`"switches":{"a":true,"b":false},"timeouts":{"identity":"2s","redis":"200ms","store":"10s"},` +
		`"timezone":null,"trusted_proxies":["10.0.0.0/8"]}`
	if got != want {
		t.Errorf("Effective() =\n%s\nwant\n%s", got, want)
	}
	if strings.Contains(got, "s3cret") {
		t.Error("Effective shows the Redis password")
	}

	// A valid window is shown resolved, days from Monday.
	c, _ = parse(t, window(`days: [fri, MON, mon], from: "09:00", to: "24:00"`))
	got = jsonOf(t, c.Effective()["access"])
	want = `{"exports":{"mode":"TEST_WINDOW","window":{"days":["mon","fri"],"from":"09:00","to":"24:00","valid":true}},"webhooks":{"mode":"OPEN"}}`
	if got != want {
		t.Errorf("Effective()[access] = %s, want %s", got, want)
	}

	// Changing what accessors return changes nothing.
	c, _ = parse(t, `trusted_proxies: [10.0.0.0/8]`)
	ps := c.TrustedProxies()
	ps[0] = netip.MustParsePrefix("0.0.0.0/0")
	c.Effective()["permissions"].(map[string]any)["admin"].([]string)[0] = "user"
	if got := fmt.Sprint(c.TrustedProxies()); got != "[10.0.0.0/8]" {
		t.Errorf("TrustedProxies after a caller's write = %s", got)
	}
	if c.Permit("admin", "user") || !c.Permit("admin", "admin") {
		t.Error("a caller's write to Effective changed the permissions")
	}
}

// TestWarnings proves warnings name the key path and line, come in file
// order, never echo a Redis URL, and that extra documents and non-string
// keys are warnings, not errors.
func TestWarnings(t *testing.T) {
	_, warns := parse(t, `rate_limits:
  send: {limit: ten}
  "odd.name": {limit: -1}
rate_limit_store: {redis: "http://user:hunter2@host"}
1: one
---
b: 2
`)
	want := []string{
		`rate_limits.send.limit (line 2): "ten" is not an integer: rate limit off for this bucket`,
		`rate_limits."odd.name".limit (line 3): negative: rate limit off for this bucket`,
		`rate_limit_store.redis (line 4): not a redis:// or rediss:// URL: rate limits stay local`,
		`line 5: the key "1" is not a string: ignored`,
		`line 6: a second YAML document: ignored, only the first is read`,
	}
	if !slices.Equal(warns, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warns, "\n"), strings.Join(want, "\n"))
	}
	_, warns = parse(t, `rate_limit_store: {redis: "redis://user:hunter2@[::1"}`)
	if len(warns) != 1 || strings.Contains(warns[0], "hunter2") {
		t.Errorf("warnings %q: want one, without the password", warns)
	}
}

// TestAliases proves anchors, aliases and merge keys work, and that a
// document that explodes through nested aliases is refused.
func TestAliases(t *testing.T) {
	c, warns := parse(t, `
rate_limits:
  send: &base {limit: 5, window: 10s}
  login: {<<: *base, limit: 2}
  convs: *base
  hooks: {<<: [*base, {limit: 9}], window: 1s}
`)
	checkWarning(t, warns, "")
	for bucket, want := range map[string]config.Limit{
		"send":  {Limit: 5, Window: 10 * time.Second},
		"login": {Limit: 2, Window: 10 * time.Second},
		"convs": {Limit: 5, Window: 10 * time.Second},
		"hooks": {Limit: 5, Window: time.Second},
	} {
		if got := c.RateLimit(bucket); got != want {
			t.Errorf("RateLimit(%s) = %v, want %v", bucket, got, want)
		}
	}

	// A mapping that merges itself is cut short, not followed forever.
	c, warns = parse(t, "rate_limits: &a {send: {limit: 1}, <<: *a}")
	if got, want := c.RateLimit("send"), (config.Limit{Limit: 1, Window: time.Minute}); got != want {
		t.Errorf("self merge: RateLimit(send) = %v, want %v", got, want)
	}
	checkWarning(t, warns, "rate_limits")

	// 1000 features, each an alias of a mapping of 1000 keys: a 20 kB file
	// that asks for a million values.
	var bomb strings.Builder
	bomb.WriteString("x: &k {")
	for i := range 1000 {
		fmt.Fprintf(&bomb, "k%d: %d, ", i, i)
	}
	bomb.WriteString("}\naccess: {")
	for i := range 1000 {
		fmt.Fprintf(&bomb, "f%d: *k, ", i)
	}
	bomb.WriteString("}\n")
	// The decoder refuses it once the expansion outgrows the document; a
	// parse that followed every alias would run into the test's timeout
	// (no wall-clock assertion here: CI machines differ tenfold).
	if _, _, err := config.Parse([]byte(bomb.String())); err == nil {
		t.Error("Parse of an alias bomb: no error")
	}
}

// TestParseErrors proves what fails the parse (and so keeps the last good
// configuration on a reload): a file that is not one YAML mapping.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml string }{
		{"syntax error", "rate_limits: {send: {limit: 5}"},
		{"bad indentation", "rate_limits:\n  send: {limit: 5}\n bad: 1\n"},
		{"tab indentation", "rate_limits:\n\tsend: {limit: 5}\n"},
		{"empty file", ""},
		{"only comments", "# nothing yet\n"},
		{"null document", "~\n"},
		{"top-level list", "- timezone: UTC\n"},
		{"top-level string", "timezone UTC\n"},
		{"duplicate top-level key", "timezone: UTC\ntimezone: Europe/Berlin\n"},
		{"duplicate nested key", "permissions:\n  admin: [admin]\n  admin: [user, admin]\n"},
		{"syntax error in a second document", "timezone: UTC\n---\n[unclosed\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, warns, err := config.Parse([]byte(tc.yaml))
			if err == nil || c != nil || warns != nil {
				t.Errorf("Parse(%q) = %v, %q, %v; want only an error", tc.yaml, c, warns, err)
			}
		})
	}

	dir := t.TempDir()
	if _, _, err := config.Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("Load of a missing file: no error")
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("a: [1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := config.Load(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load of a broken file: %v, want an error naming it", err)
	}
}

// FuzzParse proves Parse never panics, and that whatever it accepts resolves
// every accessor into its safe range, deterministically.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("testdata", "parley.yaml")); err == nil {
		f.Add(string(data))
	}
	for _, tc := range failSafeRows {
		f.Add(tc.yaml)
	}
	now := mondayNoon
	f.Fuzz(func(t *testing.T, src string) {
		c, warns, err := config.Parse([]byte(src))
		if err != nil {
			if c != nil {
				t.Fatal("an error with a Config")
			}
			return
		}
		for _, w := range warns {
			if w == "" {
				t.Error("an empty warning")
			}
		}
		eff := c.Effective()
		if _, err := json.Marshal(eff); err != nil {
			t.Fatalf("Effective is not JSON-able: %v", err)
		}
		buckets := append(slices.Collect(maps.Keys(eff["rate_limits"].(map[string]any))), "send", "")
		for _, b := range buckets {
			l := c.RateLimit(b)
			if l.Limit < 0 || l.Limit > 0 && l.Window <= 0 || l.Limit == 0 && l != (config.Limit{}) {
				t.Errorf("RateLimit(%q) = %+v", b, l)
			}
		}
		features := append(slices.Collect(maps.Keys(eff["access"].(map[string]any))), "exports", "webhooks", "nope")
		for _, name := range features {
			m := c.Access(name)
			allowed := c.Allowed(name, now)
			switch {
			case m == config.ModeOpen && !allowed, m == config.ModeClosed && allowed:
				t.Errorf("Access(%q) = %s but Allowed = %v", name, m, allowed)
			case m != config.ModeOpen && m != config.ModeClosed && m != config.ModeTestWindow:
				t.Errorf("Access(%q) = %q", name, m)
			}
		}
		for rule := range eff["permissions"].(map[string]any) {
			for _, role := range []string{"admin", "user", ""} {
				c.Permit(rule, role)
			}
		}
		if c.Permit("no such rule", "admin") {
			t.Error("a missing rule permits")
		}
		for _, p := range c.TrustedProxies() {
			if !p.IsValid() || p != p.Masked() {
				t.Errorf("trusted proxy %v", p)
			}
		}
		if u := c.RedisURL(); u != "" && !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") {
			t.Errorf("RedisURL() = %q", u)
		}
		if c.Location() == nil {
			t.Error("Location() = nil")
		}
		if c.ExportRetries() < 0 || c.ExportBackoff() < 0 {
			t.Errorf("export retries %d, backoff %v", c.ExportRetries(), c.ExportBackoff())
		}
		if c.StoreTimeout() <= 0 || c.RedisTimeout() <= 0 || c.IdentityTimeout() <= 0 {
			t.Errorf("timeouts %v %v %v", c.StoreTimeout(), c.RedisTimeout(), c.IdentityTimeout())
		}
		c2, warns2, err := config.Parse([]byte(src))
		if err != nil || !slices.Equal(warns, warns2) || !reflect.DeepEqual(eff, c2.Effective()) {
			t.Error("Parse is not deterministic")
		}
	})
}

// TestWarningsCounted: a malformed rate-limit bucket turns that bucket off
// (not back to its default) and is counted in Warnings, which the server
// exports as the config-error gauge.
func TestWarningsCounted(t *testing.T) {
	c, warns := parse(t, "rate_limits: {send: {limit: ten}, login: {limit: 3}}\n")
	if got := c.Warnings(); got != len(warns) || got != 1 {
		t.Errorf("Warnings() = %d, %d warnings returned; want 1", got, len(warns))
	}
	if got := c.RateLimit("send"); got != (config.Limit{}) {
		t.Errorf("malformed send: %v, want off", got)
	}
	if got, want := c.RateLimit("convs"), config.DefaultRateLimits()["convs"]; got != want {
		t.Errorf("unnamed convs: %v, want its default %v", got, want)
	}
	if got := config.Default().Warnings(); got != 0 {
		t.Errorf("Default().Warnings() = %d", got)
	}
}

// TestMetricsAllowed: /metrics on the public listener answers loopback
// clients always, others only inside metrics.allow; a bad entry is dropped
// with a warning, never widening the list.
func TestMetricsAllowed(t *testing.T) {
	c, warns := parse(t, "metrics:\n  allow: [10.1.0.0/16, \"2001:db8::/64\", 192.0.2.7, bad, 10.9.9.9/8]\n")
	if len(warns) != 2 {
		t.Errorf("warnings %q, want two (bad, host bits)", warns)
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.8.0.1", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"10.1.2.3", true},
		{"::ffff:10.1.2.3", true},
		{"10.2.0.1", false},
		{"2001:db8::99", true},
		{"2001:db8:1::99", false},
		{"192.0.2.7", true},
		{"192.0.2.8", false},
		{"10.9.9.9", false}, // the dropped entry
		{"203.0.113.1", false},
		{"", false},
	} {
		addr, _ := netip.ParseAddr(tc.addr)
		if got := c.MetricsAllowed(addr); got != tc.want {
			t.Errorf("MetricsAllowed(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if config.Default().MetricsAllowed(netip.MustParseAddr("192.0.2.7")) {
		t.Error("the default allows a non-loopback address")
	}
}

// FuzzParseSize: any string is a size or not, never a panic, and a size is
// never negative.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "100MiB", " 2 gib ", "5MB", "9223372036854775807", "17179869184TiB", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, ok := config.ParseSize(s); ok && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

package ratelimit

// The rate-limit buckets of Parley's routes (httpapi/routes.go) and
// WebSocket frames (gateway.FrameBuckets): the keys of the configuration's
// rate_limits, and the first part of every key a caller builds. WebSocket
// send and recall frames count in BucketSend, with HTTP sends and recalls.
const (
	BucketLogin     = "login"
	BucketRead      = "read"
	BucketConvs     = "convs"
	BucketSend      = "send"
	BucketAdmin     = "admin"
	BucketHooks     = "hooks"
	BucketWSConnect = "ws_connect"
	BucketExports   = "exports"  // POST /exports
	BucketDownload  = "download" // GET /download/{id}
)

// Buckets lists every bucket a route uses, for checking a configuration.
var Buckets = []string{BucketLogin, BucketRead, BucketConvs, BucketSend, BucketAdmin, BucketHooks, BucketWSConnect, BucketExports, BucketDownload}

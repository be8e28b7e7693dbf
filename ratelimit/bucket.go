package ratelimit

// The rate-limit buckets of Parley's routes (httpapi/routes.go) and
// WebSocket frames (gateway.FrameBuckets): the keys of the configuration's
// rate_limits, and the first part of every key a caller builds. Each
// WebSocket frame counts in its HTTP twin's bucket: send and recall frames
// in BucketSend with HTTP sends and recalls, edit frames in BucketEdit,
// react frames in BucketReact, search frames in BucketSearch.
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
	BucketEdit      = "edit"     // PATCH a message, and edit frames
	BucketReact     = "react"    // PUT/DELETE a reaction, and react frames
	BucketDMs       = "dms"      // POST /api/dms
	BucketUsers     = "users"    // GET /api/users
	BucketSearch    = "search"   // GET /api/search, and search frames
	BucketFiles     = "files"    // GET /api/files/{id} and its thumbnail
	BucketUpload    = "upload"   // the tus requests under /api/uploads/
	BucketPush      = "push"     // push subscriptions and levels (changes)
)

// Buckets lists every bucket a route uses, for checking a configuration.
var Buckets = []string{BucketLogin, BucketRead, BucketConvs, BucketSend, BucketAdmin, BucketHooks, BucketWSConnect, BucketExports, BucketDownload, BucketEdit, BucketReact, BucketDMs, BucketUsers, BucketSearch, BucketFiles, BucketUpload, BucketPush}

package metrics

// Metric names of the uploads (package upload), read from its counters at
// scrape time.
const (
	NameUploadsInProgress = "parley_uploads_in_progress"         // requests receiving upload bytes now
	NameUploadBytes       = "parley_upload_bytes_received_total" // upload bytes received
	NameUploads           = "parley_uploads_total"               // uploads by outcome
)

// Metric names of the thumbnail jobs (package thumb), read from their
// counts at scrape time.
const (
	NameThumbsQueued  = "parley_thumbnails_queued"    // files waiting for a thumbnail
	NameThumbsRunning = "parley_thumbnails_running"   // thumbnails being made
	NameThumbs        = "parley_thumbnail_jobs_total" // jobs by outcome
)

// Metric names of the Web Push worker (package webpush), read from its
// counts at scrape time.
const (
	NamePushQueued = "parley_push_queued"              // sent messages waiting for their push delay
	NamePushes     = "parley_push_notifications_total" // notifications by outcome
)

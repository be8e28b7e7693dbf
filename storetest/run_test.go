package storetest

import "testing"

// The contract matrix names these checks; scripts and CI summaries refer to
// them, so a rename must be deliberate.
func TestRequiredBehaviours(t *testing.T) {
	required := []string{
		"normal_history", "lost_reply_retry", "non_member_rejected", "unknown_conv_same_error",
		"idempotency_mismatch", "concurrent_replay_one_row", "resend_after_removal", "bounds",
		"recall_rejections", "recall_idempotent", "recall_window_db_clock", "retention_purge",
		"control_no_tombstone", "paging_under_writes", "membership_periods", "cursor_ahead",
		"epoch_changed", "trimmed", "ack_read_monotonic", "unread_multi_device", "stale_install",
		"identity_resolver",
		// Exports (export.go).
		"export_create_replay", "export_scope_not_member", "export_active_limit",
		"export_snapshot_visibility", "export_snapshot_stable", "export_claim_lease",
		"export_shards_progress", "export_finish_fail_retry", "export_revoke_expire",
		"export_purge_pinned", "export_rollback_fails_pinned", "export_concurrent_claims",
		// Edits, reactions, replies, mentions (derived.go).
		"edit_basics", "edit_rejections", "edit_idempotent", "edit_window", "derived_bounds",
		"edit_former_member", "derived_period_gap", "versions_recall", "react_set_remove",
		"react_rejections", "react_concurrent_one_event", "reply_rules", "thread_sync",
		"batch_replies_mentions", "mentions_open_members", "mentions_unread", "derived_purge",
		"derived_rollback", "feed_derived_fields",
		// Direct conversations and the directory (direct.go).
		"direct_open", "direct_open_concurrent", "directory_listing", "directory_shared",
		// Full-text search (search.go).
		"search_corpus", "search_rejections", "search_edit", "search_recall", "search_former_member",
		"search_purge", "search_rollback", "search_paging", "search_pending", "search_many_convs",
		"search_batch",
		// Uploaded files and attachments (file.go).
		"file_create", "file_quota_concurrent", "file_usage", "file_finish", "file_access",
		"file_access_recall", "file_access_purge", "file_access_rollback", "attach_rejections",
		"attach_reads", "attach_concurrent", "attach_batch", "attach_export", "file_stale", "file_delete",
	}
	have := map[string]bool{}
	for _, b := range behaviours {
		if have[b.name] {
			t.Errorf("behaviour %q listed twice", b.name)
		}
		have[b.name] = true
	}
	for _, name := range required {
		if !have[name] {
			t.Errorf("behaviour %q is missing", name)
		}
	}
}

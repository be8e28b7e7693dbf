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

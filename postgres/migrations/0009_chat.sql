-- Edits, reactions, replies, mentions (postgres/derived.go). Additive only:
-- servers of the previous version keep working on this schema during a
-- rolling upgrade (they never write the new columns, and parley_send_many
-- is unchanged).
--
-- events: reply_to is a message's thread root (NULL: none); mentions the
-- mentioned user ids of a message or an edit, sorted, joined by single
-- spaces (NULL: none); emoji and react_on describe a reaction event (NULL
-- on every other kind). An edit event has kind 'edit', target the message
-- and body the new text; a reaction event kind 'reaction' and target.
ALTER TABLE events
    ADD COLUMN reply_to BIGINT,
    ADD COLUMN mentions TEXT,
    ADD COLUMN emoji    TEXT,
    ADD COLUMN react_on BOOLEAN;

-- The derived-state reads of a page: the edits and reactions of its
-- messages, and the replies to them, each an index range per message.
CREATE INDEX events_targets ON events (conv_id, target, seq) WHERE kind IN ('edit', 'reaction');
CREATE INDEX events_replies ON events (conv_id, reply_to, seq) WHERE reply_to IS NOT NULL;

-- The current state of each (target, user, emoji) and the seq of the
-- reaction event that set it, written in that event's transaction: the
-- uniqueness guard and the "state already holds" answer of React. Counts
-- are never read from it (they fold the visible events).
CREATE TABLE reactions (
    conv_id  TEXT    NOT NULL,
    target   BIGINT  NOT NULL,
    user_id  TEXT    NOT NULL,
    emoji    TEXT    NOT NULL,
    react_on BOOLEAN NOT NULL,
    seq      BIGINT  NOT NULL,
    PRIMARY KEY (conv_id, target, user_id, emoji)
);

-- One row per mentioned user per message or edit event, written in the
-- event's transaction: what mentions_unread counts (Convs), over the
-- primary key from the caller's read cursor.
CREATE TABLE mentions (
    conv_id TEXT   NOT NULL,
    user_id TEXT   NOT NULL,
    seq     BIGINT NOT NULL,
    PRIMARY KEY (conv_id, user_id, seq)
);

-- parley_recall as in migration 0007, and the recall also covers the
-- target's edit events (their recall_seq is set too), so no version of the
-- text is served again. Same signature: servers of the previous version
-- call this one as well.
CREATE OR REPLACE FUNCTION parley_recall(p_conv TEXT, p_user TEXT, p_device TEXT, p_cmid TEXT,
    p_hash BYTEA, p_mid TEXT, p_target BIGINT, p_window_us BIGINT)
RETURNS TABLE (outcome SMALLINT, o_seq BIGINT, o_mid TEXT, o_kind TEXT, o_hash BYTEA, o_epoch BIGINT,
    t_kind TEXT, t_sender TEXT, t_recalled BOOLEAN, t_expired BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
    c_next BIGINT;
    v_at TIMESTAMPTZ;
BEGIN
    SELECT c.next_seq, c.epoch INTO c_next, o_epoch
    FROM conversations c WHERE c.id = p_conv FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        outcome := 4;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT e.seq, e.mid, e.kind, e.request_hash INTO o_seq, o_mid, o_kind, o_hash
    FROM events e WHERE e.conv_id = p_conv AND e.sender_user = p_user AND e.cmid = p_cmid;
    IF FOUND THEN
        outcome := 1;
    ELSIF EXISTS (SELECT 1 FROM tombstones t
            WHERE t.conv_id = p_conv AND t.sender_user = p_user AND t.cmid = p_cmid) THEN
        outcome := 2;
    ELSIF NOT EXISTS (SELECT 1 FROM periods p
            WHERE p.conv_id = p_conv AND p.user_id = p_user AND p.to_seq IS NULL) THEN
        outcome := 3;
    ELSE
        SELECT tg.kind, tg.sender_user, tg.recall_seq IS NOT NULL,
            clock_timestamp() > tg.created_at + p_window_us * interval '1 microsecond'
        INTO t_kind, t_sender, t_recalled, t_expired
        FROM events tg WHERE tg.conv_id = p_conv AND tg.seq = p_target;
        IF NOT FOUND OR t_kind <> 'message' OR t_sender <> p_user OR t_recalled OR t_expired THEN
            outcome := 5;
        ELSE
            INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, cmid, request_hash, target)
            VALUES (p_conv, c_next, p_mid, 'recall', p_user, p_device, p_cmid, p_hash, p_target)
            RETURNING created_at INTO v_at;
            UPDATE events SET recall_seq = c_next WHERE conv_id = p_conv AND seq = p_target;
            -- Over events_targets: the target's edits.
            UPDATE events SET recall_seq = c_next
            WHERE conv_id = p_conv AND target = p_target AND kind = 'edit';
            UPDATE conversations SET next_seq = c_next + 1, last_at = v_at WHERE id = p_conv;
            outcome := 0;
            o_seq := c_next;
            o_mid := p_mid;
        END IF;
    END IF;
    RETURN NEXT;
END
$$;

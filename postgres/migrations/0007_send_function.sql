-- Send and recall in one round trip (postgres/event.go). Each function is
-- the whole keyed append of SPEC §3.1 in the contract's order — lock the
-- conversation row → request key → tombstone → open period → insert and
-- advance the head — run by one statement in its own implicit transaction,
-- so the row lock is held only inside the database, never across a network
-- round trip. Decisions that carry a message (a replay or a mismatch, the
-- recall target's checks) are left to Go: the functions return what they
-- read, and an outcome code:
--   0 new (inserted)   1 the request key exists (replay or mismatch)
--   2 tombstoned       3 no open period   4 no such conversation
--   5 (recall) the target's checks refused it
-- Each statement in a plpgsql function takes a fresh snapshot (READ
-- COMMITTED), so the lookups after the lock see everything committed before
-- it was granted, as the two-round-trip path did.

-- parley_send appends a batch of messages to one conversation: item i is
-- (p_users[i], p_devices[i], p_cmids[i], p_hashes[i], p_bodies[i],
-- p_mids[i]). The lock is taken once; each item has its own checks and
-- outcome, sees the items before it, and new items get consecutive seqs in
-- item order. One row per item, in item order.
CREATE FUNCTION parley_send(p_conv TEXT, p_users TEXT[], p_devices TEXT[], p_cmids TEXT[],
    p_hashes BYTEA[], p_bodies TEXT[], p_mids TEXT[])
RETURNS TABLE (outcome SMALLINT, o_seq BIGINT, o_mid TEXT, o_kind TEXT, o_hash BYTEA, o_epoch BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    c_next BIGINT;
    c_epoch BIGINT;
    n BIGINT := 0;
    v_at TIMESTAMPTZ;
BEGIN
    SELECT c.next_seq, c.epoch INTO c_next, c_epoch
    FROM conversations c WHERE c.id = p_conv FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 4::SMALLINT, NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::BYTEA, NULL::BIGINT
            FROM generate_series(1, cardinality(p_users));
        RETURN;
    END IF;
    FOR i IN 1 .. cardinality(p_users) LOOP
        o_epoch := c_epoch;
        SELECT e.seq, e.mid, e.kind, e.request_hash INTO o_seq, o_mid, o_kind, o_hash
        FROM events e WHERE e.conv_id = p_conv AND e.sender_user = p_users[i] AND e.cmid = p_cmids[i];
        IF FOUND THEN
            outcome := 1;
        ELSE
            o_seq := NULL; o_mid := NULL; o_kind := NULL; o_hash := NULL;
            IF EXISTS (SELECT 1 FROM tombstones t
                    WHERE t.conv_id = p_conv AND t.sender_user = p_users[i] AND t.cmid = p_cmids[i]) THEN
                outcome := 2;
            ELSIF NOT EXISTS (SELECT 1 FROM periods p
                    WHERE p.conv_id = p_conv AND p.user_id = p_users[i] AND p.to_seq IS NULL) THEN
                outcome := 3;
            ELSE
                INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, cmid, request_hash, body)
                VALUES (p_conv, c_next + n, p_mids[i], 'message', p_users[i], p_devices[i], p_cmids[i], p_hashes[i], p_bodies[i])
                RETURNING created_at INTO v_at;
                outcome := 0;
                o_seq := c_next + n;
                o_mid := p_mids[i];
                n := n + 1;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF n > 0 THEN
        UPDATE conversations SET next_seq = c_next + n, last_at = v_at WHERE id = p_conv;
    END IF;
END
$$;

-- parley_recall appends one recall of p_target: after the checks of
-- parley_send, the target (a stored message of the caller, not recalled,
-- the database clock within p_window_us microseconds of its time), then
-- the recall event and the target's recall_seq. The t_ columns describe the
-- target for Go's messages (t_kind NULL: no such event).
CREATE FUNCTION parley_recall(p_conv TEXT, p_user TEXT, p_device TEXT, p_cmid TEXT,
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
            UPDATE conversations SET next_seq = c_next + 1, last_at = v_at WHERE id = p_conv;
            outcome := 0;
            o_seq := c_next;
            o_mid := p_mid;
        END IF;
    END IF;
    RETURN NEXT;
END
$$;

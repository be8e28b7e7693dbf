-- Group commit across conversations (postgres/event.go, issue 16): one
-- statement, one transaction and one commit for a batch of sends to several
-- conversations, so that concurrent senders in their own conversations share
-- a round trip as senders in one hot conversation already did.
--
-- parley_send_many takes item i as (p_convs[i], p_users[i], p_devices[i],
-- p_cmids[i], p_hashes[i], p_bodies[i], p_mids[i]). It first locks every
-- distinct conversation row it names, FOR NO KEY UPDATE like every appender,
-- in id order (COLLATE "C": the same order on every server, whatever the
-- database's locale), so two batches that name the same conversations wait
-- for each other instead of deadlocking; a writer of one conversation holds
-- one row lock and cannot close a cycle. Then each item, in item order, goes
-- through parley_send's checks (request key → tombstone → open period →
-- insert) against its own conversation, with its own outcome (the codes of
-- migration 0007), sees the items before it, and new items of a
-- conversation get consecutive seqs in item order. One row per item, in item
-- order, with the item's index (o_item, from 0) and, for an inserted event,
-- its created_at (o_at: what Event.At reads back, before the truncation to
-- milliseconds every reader applies).
--
-- parley_send stays for servers of the previous version during a rolling
-- upgrade: it is unchanged.
CREATE FUNCTION parley_send_many(p_convs TEXT[], p_users TEXT[], p_devices TEXT[], p_cmids TEXT[],
    p_hashes BYTEA[], p_bodies TEXT[], p_mids TEXT[])
RETURNS TABLE (o_item INT, outcome SMALLINT, o_seq BIGINT, o_mid TEXT, o_kind TEXT, o_hash BYTEA,
    o_epoch BIGINT, o_at TIMESTAMPTZ)
LANGUAGE plpgsql AS $$
DECLARE
    l_ids TEXT[];
    l_next BIGINT[];
    l_epoch BIGINT[];
    l_n BIGINT[];
    l_at TIMESTAMPTZ[];
    j INT;
BEGIN
    -- The locking clause sits above the sort: rows are locked in id order.
    SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.next_seq), '{}'), coalesce(array_agg(l.epoch), '{}')
    INTO l_ids, l_next, l_epoch
    FROM (SELECT c.id, c.next_seq, c.epoch FROM conversations c
        WHERE c.id = ANY (p_convs) ORDER BY c.id COLLATE "C" FOR NO KEY UPDATE) l;
    l_n := array_fill(0::BIGINT, ARRAY[cardinality(l_ids)]);
    l_at := array_fill(NULL::TIMESTAMPTZ, ARRAY[cardinality(l_ids)]);
    FOR i IN 1 .. cardinality(p_users) LOOP
        o_item := i - 1;
        o_seq := NULL; o_mid := NULL; o_kind := NULL; o_hash := NULL; o_epoch := NULL; o_at := NULL;
        j := array_position(l_ids, p_convs[i]);
        IF j IS NULL THEN
            outcome := 4;
            RETURN NEXT;
            CONTINUE;
        END IF;
        o_epoch := l_epoch[j];
        SELECT e.seq, e.mid, e.kind, e.request_hash INTO o_seq, o_mid, o_kind, o_hash
        FROM events e WHERE e.conv_id = p_convs[i] AND e.sender_user = p_users[i] AND e.cmid = p_cmids[i];
        IF FOUND THEN
            outcome := 1;
        ELSIF EXISTS (SELECT 1 FROM tombstones t
                WHERE t.conv_id = p_convs[i] AND t.sender_user = p_users[i] AND t.cmid = p_cmids[i]) THEN
            outcome := 2;
        ELSIF NOT EXISTS (SELECT 1 FROM periods p
                WHERE p.conv_id = p_convs[i] AND p.user_id = p_users[i] AND p.to_seq IS NULL) THEN
            outcome := 3;
        ELSE
            o_seq := l_next[j] + l_n[j];
            INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, cmid, request_hash, body)
            VALUES (p_convs[i], o_seq, p_mids[i], 'message', p_users[i], p_devices[i], p_cmids[i], p_hashes[i], p_bodies[i])
            RETURNING created_at INTO o_at;
            outcome := 0;
            o_mid := p_mids[i];
            l_n[j] := l_n[j] + 1;
            l_at[j] := o_at;
        END IF;
        RETURN NEXT;
    END LOOP;
    UPDATE conversations c SET next_seq = u.next_seq + u.n, last_at = u.last_at
    FROM unnest(l_ids, l_next, l_n, l_at) AS u (id, next_seq, n, last_at)
    WHERE c.id = u.id AND u.n > 0;
END
$$;

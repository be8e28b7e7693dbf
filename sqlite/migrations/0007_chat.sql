-- Edits, reactions, replies and mentions: new event kinds and columns, and
-- the derived rows written in the transaction of the event that causes
-- them (docs/design.md#derived-state).

-- reply_to: a message's thread root. mentions: the mentioned user ids,
-- sorted, space separated (messages and edits). emoji and react_on: a
-- reaction event's emoji and whether it sets (1) or removes (0) it.
ALTER TABLE events ADD COLUMN reply_to INTEGER;
ALTER TABLE events ADD COLUMN mentions TEXT;
ALTER TABLE events ADD COLUMN emoji TEXT;
ALTER TABLE events ADD COLUMN react_on INTEGER;

-- The edits and reactions of a message, and the replies of a thread root,
-- in seq order: what a read decorates a page's messages with.
CREATE INDEX events_targets ON events (conv_id, target, seq) WHERE target IS NOT NULL;
CREATE INDEX events_replies ON events (conv_id, reply_to, seq) WHERE reply_to IS NOT NULL;

-- The current reaction of a user with an emoji on a message, and the seq of
-- the event that set it: one row each, so concurrent identical reactions
-- make one event. Counts are never read from here (they fold the events a
-- reader may see); the row answers "the state already holds".
CREATE TABLE reactions (
    conv_id  TEXT NOT NULL,
    target   INTEGER NOT NULL,
    user_id  TEXT NOT NULL,
    emoji    TEXT NOT NULL,
    react_on INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    PRIMARY KEY (conv_id, target, user_id, emoji)
) STRICT;

-- One row per user a message or an edit mentions, at the event's seq: what
-- mentions_unread counts.
CREATE TABLE mentions (
    conv_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (conv_id, user_id, seq)
) STRICT;

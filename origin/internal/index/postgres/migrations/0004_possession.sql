-- Which scopes uploaded which xorbs themselves (index.Index.RecordPossession): a shard may
-- reference a single-chunk xorb only when its scope holds one of these rows (docs/security.md).
-- Scopes compare bytewise, as in visibility.
CREATE TABLE possession (
    scope text  COLLATE "C" NOT NULL,
    xorb  bytea NOT NULL CHECK (octet_length(xorb) = 32),
    PRIMARY KEY (scope, xorb)
);

-- Which scopes uploaded which xorbs themselves (index.Index.RecordPossession): a shard may
-- reference a single-chunk xorb only when its scope holds one of these rows (docs/security.md).
CREATE TABLE possession (
    scope TEXT NOT NULL,
    xorb  BLOB NOT NULL,
    PRIMARY KEY (scope, xorb)
) WITHOUT ROWID;

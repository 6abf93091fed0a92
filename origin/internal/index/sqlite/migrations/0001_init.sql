-- Initial schema; see the package documentation of origin/internal/index for the picture.
-- Large blobs (layouts, records) live in rowid tables so that overflow pages do not bloat the
-- key b-tree; small key-only rows use WITHOUT ROWID tables.
CREATE TABLE xorbs (
    hash        BLOB PRIMARY KEY NOT NULL,
    stored_size INTEGER NOT NULL,
    layout      BLOB NOT NULL
);
CREATE TABLE files (
    hash   BLOB PRIMARY KEY NOT NULL,
    record BLOB NOT NULL
);
CREATE TABLE visibility (
    scope TEXT NOT NULL,
    file  BLOB NOT NULL,
    PRIMARY KEY (scope, file)
) WITHOUT ROWID;
CREATE TABLE shards (
    hash  BLOB PRIMARY KEY NOT NULL,
    scope TEXT NOT NULL,
    xorbs BLOB NOT NULL,
    at    INTEGER NOT NULL
);
CREATE TABLE dedup (
    chunk BLOB PRIMARY KEY NOT NULL,
    shard BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE events (
    seq   INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    files BLOB,
    at    INTEGER NOT NULL
);

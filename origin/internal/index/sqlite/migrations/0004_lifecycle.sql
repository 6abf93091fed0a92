-- Garbage collection (index.Lifecycle; docs/decisions.md, "Data lifecycle").
-- condemned: indexed xorbs no visible file referenced when the collector looked, since at
-- (unix ns). The dedup route leaves them out; a registration referencing one revives it.
CREATE TABLE condemned (
    xorb BLOB PRIMARY KEY,
    at   INTEGER NOT NULL
) WITHOUT ROWID;
-- swept: xorbs removed from the index; done = 0 while their object may still exist (PutXorb
-- refuses them), 1 once it is deleted. A registration referencing a swept xorb is refused.
CREATE TABLE swept (
    xorb BLOB PRIMARY KEY,
    at   INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
-- Events of a sweep name the xorbs deleted (edges evict their bytes); NULL for the others.
ALTER TABLE events ADD COLUMN xorbs BLOB;
-- Whether a file is visible in any scope (the collector's scan, Sweep's re-check).
CREATE INDEX visibility_file ON visibility(file);

-- Garbage collection (index.Lifecycle; docs/decisions.md, "Data lifecycle").
-- condemned: indexed xorbs no visible file referenced when the collector looked, since at.
-- The dedup route leaves them out; a registration referencing one revives it.
CREATE TABLE condemned (
    xorb bytea PRIMARY KEY CHECK (octet_length(xorb) = 32),
    at   timestamptz NOT NULL
);
-- swept: xorbs removed from the index; done = false while their object may still exist
-- (PutXorb refuses them), true once it is deleted. A registration referencing a swept xorb
-- is refused.
CREATE TABLE swept (
    xorb bytea PRIMARY KEY CHECK (octet_length(xorb) = 32),
    at   timestamptz NOT NULL,
    done boolean NOT NULL DEFAULT false
);
-- Events of a sweep name the xorbs deleted (edges evict their bytes); NULL for the others.
ALTER TABLE events ADD COLUMN xorbs bytea;
-- Whether a file is visible in any scope (the collector's scan, Sweep's re-check).
CREATE INDEX visibility_file ON visibility(file);

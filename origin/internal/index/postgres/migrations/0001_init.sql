-- Initial schema; see the package documentation of origin/internal/index for the picture.
-- Blobs are stored uncompressed out of line (STORAGE EXTERNAL): hashes do not compress, and
-- skipping pglz makes large records and layouts cheaper to write and to read.
CREATE TABLE xorbs (
    hash        bytea PRIMARY KEY CHECK (octet_length(hash) = 32),
    stored_size bigint NOT NULL CHECK (stored_size >= 0),
    layout      bytea NOT NULL
);
ALTER TABLE xorbs ALTER COLUMN layout SET STORAGE EXTERNAL;

CREATE TABLE files (
    hash   bytea PRIMARY KEY CHECK (octet_length(hash) = 32),
    record bytea NOT NULL
);
ALTER TABLE files ALTER COLUMN record SET STORAGE EXTERNAL;

CREATE TABLE visibility (
    scope text  NOT NULL,
    file  bytea NOT NULL,
    PRIMARY KEY (scope, file)
);

CREATE TABLE shards (
    hash  bytea PRIMARY KEY CHECK (octet_length(hash) = 32),
    scope text  NOT NULL,
    xorbs bytea NOT NULL,
    at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE dedup (
    chunk bytea PRIMARY KEY CHECK (octet_length(chunk) = 32),
    shard bytea NOT NULL
);

-- seq is assigned under a transaction-scoped advisory lock (see Hide), so sequence order is
-- commit order and a reader paging by seq never skips an event committed late.
CREATE TABLE events (
    seq   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope text  NOT NULL,
    files bytea,
    at    timestamptz NOT NULL DEFAULT now()
);

-- Scopes are compared bytewise: no locale may make two scopes equal, and memcmp is cheaper
-- than the cluster's collation on the hot visibility key.
ALTER TABLE visibility ALTER COLUMN scope TYPE text COLLATE "C";

ALTER TABLE ms_smt_namespaces ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE ms_smt_strata ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE ms_smt_pins (
        ns INTEGER NOT NULL,
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        root_hash BLOB,
        root_sum INTEGER,
        PRIMARY KEY (ns, name)
    );
    CREATE INDEX ms_smt_pins_version ON ms_smt_pins (ns, version);
    CREATE TABLE ms_smt_history (
        id INTEGER PRIMARY KEY,
        ns INTEGER NOT NULL,
        path BLOB NOT NULL,
        depth INTEGER NOT NULL,
        from_version INTEGER NOT NULL,
        to_version INTEGER NOT NULL,
        body BLOB NOT NULL
    );
    CREATE UNIQUE INDEX ms_smt_history_position ON ms_smt_history (ns, path, depth, from_version);

ALTER TABLE ms_smt_namespaces ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE ms_smt_strata ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
    CREATE TABLE ms_smt_pins (
        ns BIGINT NOT NULL,
        name TEXT NOT NULL,
        version BIGINT NOT NULL,
        root_hash BYTEA,
        root_sum BIGINT,
        PRIMARY KEY (ns, name)
    );
    CREATE INDEX ms_smt_pins_version ON ms_smt_pins (ns, version);
    CREATE TABLE ms_smt_history (
        ns BIGINT NOT NULL,
        path BYTEA NOT NULL,
        depth INT NOT NULL,
        from_version BIGINT NOT NULL,
        to_version BIGINT NOT NULL,
        body BYTEA NOT NULL,
        PRIMARY KEY (ns, path, depth, from_version)
    );

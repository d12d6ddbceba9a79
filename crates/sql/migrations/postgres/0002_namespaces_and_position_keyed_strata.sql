CREATE TABLE ms_smt_namespaces (
                id BIGSERIAL PRIMARY KEY,
                name TEXT NOT NULL UNIQUE,
                height INT NOT NULL,
                root_hash BYTEA,
                root_sum BIGINT
            );
            CREATE TABLE ms_smt_strata (
                ns BIGINT NOT NULL,
                path BYTEA NOT NULL,
                depth INT NOT NULL,
                body BYTEA NOT NULL,
                PRIMARY KEY (ns, path, depth)
            );

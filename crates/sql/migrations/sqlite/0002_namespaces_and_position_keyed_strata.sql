CREATE TABLE ms_smt_namespaces (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL UNIQUE,
                height INTEGER NOT NULL,
                root_hash BLOB,
                root_sum INTEGER
            );
            CREATE TABLE ms_smt_strata (
                ns INTEGER NOT NULL,
                path BLOB NOT NULL,
                depth INTEGER NOT NULL,
                body BLOB NOT NULL,
                PRIMARY KEY (ns, path, depth)
            ) WITHOUT ROWID;

ALTER TABLE ms_smt_strata SET (autovacuum_vacuum_scale_factor = 0.05);

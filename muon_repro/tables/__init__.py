"""The bottom floor, importing nothing else of the package: every table's schema, the set's generation
stamp, ``read_table`` / ``read_tables`` / ``write_tables`` / ``write_table``, and ``write_atomic`` /
``staged_dir`` / ``swap_dir``, the one way anything is written.

    schema      Column and TableSchema: a table's columns, dtypes, units, meanings; conform a frame
    schemas     every table of ``metrics/`` declared once (SCHEMAS, TABLE_NAMES, COMM_KINDS)
    reference   the schemas as Markdown: the table reference of docs/method.md and the dataset card
    stamp       what makes the tables of one folder one set: the generation stamp, MixedTables
    io          write_tables (one set, swapped in whole), write_table (one table), read_table,
                read_tables (a set, checked), folder_generation, table_set_problems
    files       write_atomic, staged_dir / swap_dir, check_out_folder: nothing half-written, ever

It imports no other module of the package, and nothing heavy on import: pandas and pyarrow are
imported by the functions that need them, so the trace readers' worker processes stay light.
"""

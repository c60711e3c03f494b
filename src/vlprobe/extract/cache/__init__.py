"""The HDF5 activation cache: its schema (:mod:`.schema`), the writer that creates and resumes
files (:mod:`.writer`), the reader (:mod:`.reader`) and the shard merge (:mod:`.merge`)."""

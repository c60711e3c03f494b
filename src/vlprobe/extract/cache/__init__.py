"""The HDF5 activation cache: its schema (:mod:`.schema`), the writer that creates and resumes
files (:mod:`.writer`), the reader (:mod:`.reader`) and the shard merge (:mod:`.merge`); the
writer and the merge are the cache kind of :mod:`vlprobe.extract.sharded_h5`."""

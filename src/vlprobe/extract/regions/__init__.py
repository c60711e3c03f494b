"""Region features for the cross-encoders: vlprobe's HDF5 store (:mod:`.store`), the precomputed
formats it imports and exports (:mod:`.formats`), box conversions (:mod:`.boxes`), the Visual
Genome detector (:mod:`.detector`) and extraction from pixels with it: image lists
(:mod:`.sources`), the resumable file (:mod:`.chunked`), the loop (:mod:`.extraction`) and the
merge of shards (:mod:`.merge`); the resumable file and the merge are the region kind of
:mod:`vlprobe.extract.sharded_h5`."""

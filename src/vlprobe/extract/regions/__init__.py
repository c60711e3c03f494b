"""Region features for the cross-encoders: vlprobe's HDF5 store (:mod:`.store`), the precomputed
formats it imports and exports (:mod:`.formats`) and box conversions (:mod:`.boxes`)."""

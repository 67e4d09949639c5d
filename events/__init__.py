"""The events contract: event types (`events.catalog`), metadata (`events.meta`), subjects
(`events.subjects`) and the wire codec (`events.codec`)."""

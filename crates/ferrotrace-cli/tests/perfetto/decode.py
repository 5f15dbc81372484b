"""Decodes a Perfetto trace with Perfetto's own protos (the `perfetto` package from PyPI) and prints,
one JSON object per line, what a viewer shows: slices (begin/end, with the debug annotations a
slice's arguments come from), instants with their debug annotations, counter values and callstack samples, each with its absolute timestamp and thread.

Usage: python3 decode.py TRACE.pftrace
Timestamps follow the sequence's clocks as trace_processor does: a ClockSnapshot sets the
incremental clock 64, whose packets carry deltas."""
import json
import sys
import zlib

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace


def packets(data):
    for p in Trace.FromString(data).packet:
        if p.HasField("compressed_packets"):
            yield from packets(zlib.decompress(p.compressed_packets))
        else:
            yield p


def main(path):
    with open(path, "rb") as f:
        data = f.read()
    clock = {}  # sequence -> current time of its incremental clock
    interned = {}  # sequence -> {"names", "functions", "frames", "stacks"}
    track_tid = {}  # track uuid -> tid
    counters = set()  # counter track uuids
    default_track = {}  # sequence -> track uuid of its TrackEvents
    for p in packets(data):
        seq = p.trusted_packet_sequence_id
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("thread"):
                track_tid[d.uuid] = d.thread.tid
            if d.HasField("counter"):
                counters.add(d.uuid)
            continue
        if p.sequence_flags & 1:
            interned[seq] = {"names": {}, "functions": {}, "frames": {}, "stacks": {}}
        if p.HasField("clock_snapshot"):
            for c in p.clock_snapshot.clocks:
                if c.clock_id == 64:
                    clock[seq] = c.timestamp
            continue
        if p.HasField("trace_packet_defaults"):
            default_track[seq] = p.trace_packet_defaults.track_event_defaults.track_uuid
            continue
        ts = clock.get(seq, 0) + p.timestamp
        clock[seq] = ts
        st = interned.setdefault(seq, {"names": {}, "functions": {}, "frames": {}, "stacks": {}})
        if p.HasField("interned_data"):
            i = p.interned_data
            for n in i.event_names:
                st["names"][n.iid] = n.name
            for n in i.function_names:
                st["functions"][n.iid] = n.str.decode()
            for f in i.frames:
                st["frames"][f.iid] = f.function_name_id
            for c in i.callstacks:
                st["stacks"][c.iid] = list(c.frame_ids)
        if p.HasField("track_event"):
            e = p.track_event
            track = e.track_uuid if e.HasField("track_uuid") else default_track.get(seq)
            out = {"ts": ts, "tid": track_tid.get(track)}
            args = {}
            for a in e.debug_annotations:
                for v in ("bool_value", "uint_value", "int_value", "double_value", "string_value"):
                    if a.HasField(v):
                        args[a.name] = getattr(a, v)
            if e.type == 1:
                out.update(kind="begin", name=st["names"].get(e.name_iid, e.name))
                if args:
                    out.update(args=args)
            elif e.type == 2:
                out.update(kind="end")
                if args:
                    out.update(args=args)
            elif e.type == 3:
                out.update(kind="instant", name=e.name, args=args)
            elif e.type == 4:
                out.update(kind="counter", value=e.counter_value, counter=track in counters)
            print(json.dumps(out))
        if p.HasField("perf_sample"):
            s = p.perf_sample
            frames = st["stacks"].get(s.callstack_iid, [])
            names = [st["functions"].get(st["frames"].get(f), "?") for f in frames]
            print(json.dumps({"ts": ts, "tid": s.tid, "pid": s.pid, "kind": "sample",
                              "stack": names, "weight": s.timebase_count}))


if __name__ == "__main__":
    main(sys.argv[1])

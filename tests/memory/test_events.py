from pagedkit.memory import BlockAllocator, EventBus, EventLog, KVCacheManager
from pagedkit.memory import allocator as allocator_module


def test_no_listener_means_no_event_objects(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("an Event was built with nobody listening")

    monkeypatch.setattr(allocator_module, "Event", boom)
    pool = BlockAllocator(4, 2)
    b = pool.allocate()
    pool.append_tokens(b, 2)
    pool.fork(b)
    pool.copy_on_write(b)
    pool.free(b)


def test_unsubscribe_stops_delivery():
    bus = EventBus()
    assert not bus
    log = EventLog(bus)
    assert bus
    pool = BlockAllocator(2, 2, events=bus)
    pool.allocate()
    log.close()
    pool.allocate()
    assert len(log) == 1 and not bus


def test_manager_shares_one_bus():
    kv = KVCacheManager(4, 2, num_swap_blocks=4)
    log = EventLog(kv.events)
    kv.allocate_slots("A", [1, 2, 3])
    kv.swap_out(["A"])
    kv.swap_in(["A"])
    kinds = log.kinds()
    assert kinds.count("swap_out") == 2 and kinds.count("swap_in") == 2
    swap_out = next(e for e in log if e.kind.value == "swap_out")
    assert swap_out.src == 0  # the GPU block it came from

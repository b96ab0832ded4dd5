//! memcached's semantics, dedup counts, tenants, quotas and rate limits of
//! one node's key-value service, in memory.

use bytes::Bytes;
use proptest::prelude::*;
use quarry_kv::{KvConfig, KvMode, KvNode, TenantConfig};
use quarry_kv_api::{
    Expiry, FailKind, Item, ItemKind, KvAnswer, KvCall, KvOp, KvReply, KvRequest, StoreMode,
    TenantName,
};
use quarry_store::MemTableStore;

type Node = KvNode<MemTableStore>;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn store(key: &str, mode: StoreMode, value: &[u8]) -> KvOp {
    KvOp::Store {
        key: b(key),
        mode,
        flags: 5,
        expiry: Expiry::Never,
        kind: ItemKind::Plain,
        value: Bytes::copy_from_slice(value),
    }
}

fn get(key: &str) -> KvOp {
    KvOp::Get {
        key: b(key),
        touch: None,
    }
}

struct Caller<'a> {
    node: &'a Node,
    tenant: &'a str,
    secret: &'a str,
}

fn caller<'a>(node: &'a Node, tenant: &'a str, secret: &'a str) -> Caller<'a> {
    Caller {
        node,
        tenant,
        secret,
    }
}

impl Caller<'_> {
    async fn call(&self, request: KvRequest) -> KvReply {
        self.node
            .call(KvCall {
                tenant: TenantName::new(self.tenant).unwrap(),
                secret: b(self.secret),
                request,
            })
            .await
    }

    async fn run(&self, ops: Vec<KvOp>) -> Vec<KvAnswer> {
        match self.call(KvRequest::Ops(ops)).await {
            KvReply::Answers(a) => a,
            other => panic!("answered {other:?}"),
        }
    }

    async fn one(&self, op: KvOp) -> KvAnswer {
        self.run(vec![op]).await.pop().unwrap()
    }

    async fn value(&self, key: &str) -> Option<Bytes> {
        match self.one(get(key)).await {
            KvAnswer::Value(Item { value, .. }) => Some(value),
            KvAnswer::Miss => None,
            other => panic!("get answered {other:?}"),
        }
    }

    async fn stat(&self, name: &str) -> u64 {
        match self.call(KvRequest::Stats).await {
            KvReply::Stats(s) => s
                .into_iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no stat {name}")),
            other => panic!("stats answered {other:?}"),
        }
    }
}

fn open_node() -> Caller<'static> {
    let node = rt()
        .block_on(Node::open(&KvConfig::default(), None))
        .unwrap();
    Caller {
        node: Box::leak(Box::new(node)),
        tenant: "default",
        secret: "",
    }
}

fn cas_of(a: &KvAnswer) -> u64 {
    match a {
        KvAnswer::Stored { cas } | KvAnswer::Number { cas, .. } => *cas,
        KvAnswer::Value(i) => i.cas,
        other => panic!("no CAS in {other:?}"),
    }
}

#[test]
fn storage_commands_follow_memcached() {
    let c = open_node();
    rt().block_on(async {
        assert_eq!(
            c.one(store("k", StoreMode::Replace, b"x")).await,
            KvAnswer::NotStored
        );
        assert_eq!(
            c.one(store("k", StoreMode::Append, b"x")).await,
            KvAnswer::NotStored
        );
        assert!(matches!(
            c.one(store("k", StoreMode::Add, b"one")).await,
            KvAnswer::Stored { .. }
        ));
        assert_eq!(
            c.one(store("k", StoreMode::Add, b"two")).await,
            KvAnswer::NotStored
        );
        c.one(store("k", StoreMode::Append, b"+a")).await;
        c.one(store("k", StoreMode::Prepend, b"p+")).await;
        assert_eq!(c.value("k").await.unwrap(), b("p+one+a"));
        // Appends keep the flags of the item, not the command's.
        let append = KvOp::Store {
            key: b("k"),
            mode: StoreMode::Append,
            flags: 99,
            expiry: Expiry::Never,
            kind: ItemKind::Plain,
            value: b("!"),
        };
        c.one(append).await;
        let KvAnswer::Value(item) = c.one(get("k")).await else {
            panic!()
        };
        assert_eq!(item.flags, 5);
        // CAS: a stale value is refused, the current one taken, a missing key is not found.
        let stale = item.cas;
        assert!(matches!(
            c.one(store("k", StoreMode::Cas(stale), b"new")).await,
            KvAnswer::Stored { .. }
        ));
        assert_eq!(
            c.one(store("k", StoreMode::Cas(stale), b"newer")).await,
            KvAnswer::Exists
        );
        assert_eq!(
            c.one(store("nope", StoreMode::Cas(1), b"x")).await,
            KvAnswer::NotFound
        );
        assert_eq!(c.value("k").await.unwrap(), b("new"));
        // Every change gives a new CAS value.
        let a = cas_of(&c.one(store("k", StoreMode::Set, b"1")).await);
        let bb = cas_of(&c.one(store("k", StoreMode::Set, b"1")).await);
        assert_ne!(a, bb);
        assert_eq!(c.stat("cas_badval").await, 1);
        assert_eq!(c.stat("cas_misses").await, 1);
        assert_eq!(c.stat("cas_hits").await, 1);
    });
}

#[test]
fn incr_decr_delete_touch_and_expiry_follow_memcached() {
    let c = open_node();
    rt().block_on(async {
        let incr = |key: &str, delta, decrement| KvOp::Arith {
            key: b(key),
            decrement,
            delta,
            vivify: None,
            cas: None,
        };
        assert_eq!(c.one(incr("n", 1, false)).await, KvAnswer::NotFound);
        c.one(store("n", StoreMode::Set, b"18446744073709551615"))
            .await;
        // incr wraps at 2^64, decr stops at 0.
        assert!(matches!(
            c.one(incr("n", 2, false)).await,
            KvAnswer::Number { value: 1, .. }
        ));
        assert!(matches!(
            c.one(incr("n", 5, true)).await,
            KvAnswer::Number { value: 0, .. }
        ));
        c.one(store("t", StoreMode::Set, b"12a")).await;
        assert!(matches!(
            c.one(incr("t", 1, false)).await,
            KvAnswer::Failed {
                kind: FailKind::NonNumeric,
                ..
            }
        ));
        let vivify = KvOp::Arith {
            key: b("v"),
            decrement: false,
            delta: 9,
            vivify: Some((40, Expiry::Never)),
            cas: None,
        };
        assert!(matches!(
            c.one(vivify.clone()).await,
            KvAnswer::Number { value: 40, .. }
        ));
        assert!(matches!(
            c.one(vivify).await,
            KvAnswer::Number { value: 49, .. }
        ));

        // A delete with a stale CAS is refused; a plain one deletes once.
        let cas = cas_of(&c.one(get("v")).await);
        let del = |cas| KvOp::Delete { key: b("v"), cas };
        assert_eq!(c.one(del(Some(cas + 1000))).await, KvAnswer::Exists);
        assert_eq!(c.one(del(Some(cas))).await, KvAnswer::Deleted);
        assert_eq!(c.one(del(None)).await, KvAnswer::NotFound);

        // An expiry in the past removes the item; touch and gat move it.
        let past = KvOp::Store {
            key: b("e"),
            mode: StoreMode::Set,
            flags: 0,
            expiry: Expiry::At(1),
            kind: ItemKind::Plain,
            value: b("gone"),
        };
        c.one(past).await;
        assert_eq!(c.value("e").await, None);
        assert_eq!(c.stat("get_expired").await, 1);
        c.one(store("e", StoreMode::Set, b"here")).await;
        let touch = |expiry| KvOp::Touch {
            key: b("e"),
            expiry,
        };
        assert_eq!(
            c.one(touch(Expiry::At(u64::MAX / 2))).await,
            KvAnswer::Touched
        );
        let gat = KvOp::Get {
            key: b("e"),
            touch: Some(Expiry::At(1)),
        };
        assert!(matches!(c.one(gat).await, KvAnswer::Value(_)));
        assert_eq!(c.value("e").await, None);
        assert_eq!(c.one(touch(Expiry::Never)).await, KvAnswer::NotFound);
    });
}

#[test]
fn flush_all_drops_only_the_callers_tenant_and_a_delayed_flush_waits() {
    let node = rt()
        .block_on(Node::open(&two_tenants(KvMode::Cache, 1 << 20), None))
        .unwrap();
    let a = caller(&node, "alpha", "pa");
    let z = caller(&node, "zeta", "pz");
    rt().block_on(async {
        a.one(store("k", StoreMode::Set, b"a's")).await;
        z.one(store("k", StoreMode::Set, b"z's")).await;
        let later = Expiry::At(u64::MAX / 2);
        assert_eq!(
            a.call(KvRequest::FlushAll { at: later }).await,
            KvReply::Flushed
        );
        assert_eq!(a.value("k").await, Some(b("a's")));
        assert_eq!(
            a.call(KvRequest::FlushAll { at: Expiry::Never }).await,
            KvReply::Flushed
        );
        assert_eq!(a.value("k").await, None);
        assert_eq!(z.value("k").await, Some(b("z's")));
        assert_eq!(a.stat("curr_items").await, 0);
        assert_eq!(z.stat("curr_items").await, 1);
    });
}

fn two_tenants(mode: KvMode, max_bytes: u64) -> KvConfig {
    let t = |name: &str, secret: &str| TenantConfig {
        name: name.into(),
        secret: secret.into(),
        mode,
        max_bytes,
        max_keys: u64::MAX,
        ops_per_sec: 0,
        bytes_per_sec: 0,
        burst_ms: quarry_kv::DEFAULT_BURST_MS,
        dedup: true,
    };
    KvConfig {
        tenants: vec![t("alpha", "pa"), t("zeta", "pz")],
        ..KvConfig::default()
    }
}

#[test]
fn tenants_see_only_their_own_keys_and_a_wrong_secret_is_refused() {
    let node = rt()
        .block_on(Node::open(&two_tenants(KvMode::Cache, 1 << 20), None))
        .unwrap();
    let a = caller(&node, "alpha", "pa");
    let z = caller(&node, "zeta", "pz");
    let thief = caller(&node, "zeta", "pa");
    let stranger = caller(&node, "default", "");
    rt().block_on(async {
        let big = vec![3u8; 4096];
        a.one(store("secret", StoreMode::Set, &big)).await;
        // Same key, same bytes: z's copy is its own (no dedup across
        // tenants, so z's stored bytes do not reveal a's value).
        assert_eq!(z.value("secret").await, None);
        assert_eq!(
            z.one(store("secret", StoreMode::Add, &big)).await,
            KvAnswer::Stored { cas: 2 }
        );
        assert_eq!(z.stat("dedup_hits").await, 0);
        assert_eq!(z.stat("stored_bytes").await, 4096);
        assert_eq!(a.stat("curr_items").await, 1);
        for bad in [&thief, &stranger] {
            let refused = bad.call(KvRequest::Ops(vec![get("secret")])).await;
            assert!(
                matches!(
                    &refused,
                    KvReply::Refused {
                        kind: FailKind::Denied,
                        ..
                    }
                ),
                "{refused:?}"
            );
            assert!(matches!(
                bad.call(KvRequest::Stats).await,
                KvReply::Refused { .. }
            ));
            assert!(matches!(
                bad.call(KvRequest::FlushAll { at: Expiry::Never }).await,
                KvReply::Refused { .. }
            ));
        }
        assert_eq!(a.value("secret").await.unwrap().len(), 4096);
    });
}

#[test]
fn a_full_durable_tenant_refuses_and_keeps_what_it_has_and_a_cache_evicts() {
    let config = |mode| {
        let mut c = two_tenants(mode, 20_000);
        c.tenants[0].max_keys = 1000;
        c.tenants[1].max_keys = 3;
        c
    };
    // Durable tenants need tables; in memory here.
    // The log writer runs on the runtime that opened the node.
    let runtime = rt();
    let tables = std::sync::Arc::new(MemTableStore::new());
    let node = runtime
        .block_on(Node::open(&config(KvMode::Durable), Some(tables)))
        .unwrap();
    let a = caller(&node, "alpha", "pa");
    let z = caller(&node, "zeta", "pz");
    runtime.block_on(async {
        let mut stored = 0;
        for i in 0..40 {
            let v = vec![i as u8; 1000];
            match a.one(store(&format!("k{i}"), StoreMode::Set, &v)).await {
                KvAnswer::Stored { .. } => stored += 1,
                KvAnswer::Failed { kind, message } => {
                    assert_eq!(kind, FailKind::QuotaBytes);
                    assert!(
                        message.starts_with("out of memory storing object"),
                        "{message}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(
            (15..20).contains(&stored),
            "{stored} items of 1000 bytes in 20 000"
        );
        for i in 0..stored {
            assert_eq!(
                a.value(&format!("k{i}")).await.unwrap(),
                vec![i as u8; 1000]
            );
        }
        for i in 0..3 {
            z.one(store(&format!("k{i}"), StoreMode::Set, b"x")).await;
        }
        let fourth = z.one(store("k3", StoreMode::Set, b"x")).await;
        assert!(
            matches!(
                fourth,
                KvAnswer::Failed {
                    kind: FailKind::QuotaKeys,
                    ..
                }
            ),
            "{fourth:?}"
        );
        // An overwrite of a present key needs no new key.
        assert!(matches!(
            z.one(store("k0", StoreMode::Set, b"y")).await,
            KvAnswer::Stored { .. }
        ));
        node.audit().unwrap();
    });

    let node = rt()
        .block_on(Node::open(&config(KvMode::Cache), None))
        .unwrap();
    let a = caller(&node, "alpha", "pa");
    rt().block_on(async {
        for i in 0..40 {
            let v = vec![i as u8; 1000];
            assert!(matches!(
                a.one(store(&format!("k{i}"), StoreMode::Set, &v)).await,
                KvAnswer::Stored { .. }
            ));
        }
        // The oldest went; the newest are all there.
        assert_eq!(a.value("k0").await, None);
        assert_eq!(a.value("k39").await.unwrap(), vec![39u8; 1000]);
        assert!(a.stat("evictions").await >= 20);
        assert!(a.stat("bytes").await <= 20_000);
        node.audit().unwrap();
    });
}

#[test]
fn a_tenant_over_its_rate_waits_then_is_refused() {
    let mut config = two_tenants(KvMode::Cache, 1 << 20);
    config.tenants[0].ops_per_sec = 20;
    config.tenants[0].burst_ms = 1000;
    config.throttle_wait_ms = 200;
    let node = rt().block_on(Node::open(&config, None)).unwrap();
    let a = caller(&node, "alpha", "pa");
    let z = caller(&node, "zeta", "pz");
    rt().block_on(async {
        let started = std::time::Instant::now();
        // 20 in the bucket, then 4 more a 200 ms wait can cover.
        for _ in 0..24 {
            a.one(get("x")).await;
        }
        assert!(started.elapsed() >= std::time::Duration::from_millis(150));
        let over = a.call(KvRequest::Ops(vec![get("x"); 30])).await;
        assert!(
            matches!(&over, KvReply::Refused { kind: FailKind::Throttled, message } if message.contains("alpha")),
            "{over:?}"
        );
        // The other tenant has no limit and never waits.
        z.run(vec![get("x"); 1000]).await;
        assert!(a.stat("throttled").await >= 1);
        assert_eq!(a.stat("throttle_refused").await, 1);
    });
}

/// A tenant's buckets hold `burst_ms` of its rate: that many operations
/// pass at once, and a burst beyond waits for the rate, however long the
/// tenant was idle.
#[test]
fn a_tenant_may_burst_only_its_buckets_depth() {
    let mut config = two_tenants(KvMode::Cache, 1 << 20);
    config.tenants[0].ops_per_sec = 1000;
    config.tenants[0].burst_ms = 10;
    let node = rt().block_on(Node::open(&config, None)).unwrap();
    let a = caller(&node, "alpha", "pa");
    rt().block_on(async {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        // Ten tokens, one a call: none waits.
        for _ in 0..10 {
            a.one(get("x")).await;
        }
        assert_eq!(a.stat("throttled").await, 0);
        // 500 at once: a second deep bucket would take them, this one
        // makes them wait for about half a second's worth.
        a.run(vec![get("x"); 500]).await;
        assert_eq!(a.stat("throttled").await, 1);
    });
}

/// One random operation over a few keys and values, big and small, some
/// already expired.
fn arb_op() -> impl Strategy<Value = KvOp> {
    let key = (0u8..6).prop_map(|k| Bytes::from(vec![b'k', k]));
    let value = (0usize..5, 0usize..3).prop_map(|(v, size)| {
        let len = [10, 300, 2000][size];
        Bytes::from(vec![v as u8; len])
    });
    let expiry = prop_oneof![4 => Just(Expiry::Never), 1 => Just(Expiry::At(1))];
    let mode = prop_oneof![
        Just(StoreMode::Set),
        Just(StoreMode::Add),
        Just(StoreMode::Replace),
        Just(StoreMode::Append),
        Just(StoreMode::Prepend),
        (0u64..40).prop_map(StoreMode::Cas),
    ];
    prop_oneof![
        6 => (key.clone(), mode, value, expiry.clone()).prop_map(|(key, mode, value, expiry)| KvOp::Store {
            key, mode, flags: 0, expiry, kind: ItemKind::Plain, value
        }),
        2 => key.clone().prop_map(|key| KvOp::Get { key, touch: None }),
        2 => key.clone().prop_map(|key| KvOp::Delete { key, cas: None }),
        1 => (key.clone(), expiry).prop_map(|(key, expiry)| KvOp::Touch { key, expiry }),
        1 => (key, any::<bool>(), 0u64..5).prop_map(|(key, decrement, delta)| KvOp::Arith {
            key, decrement, delta, vivify: Some((7, Expiry::Never)), cas: None
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Through any sequence of stores, appends, deletes, expiries,
    /// touches, numbers, flushes and evictions, every value's count is
    /// the number of items holding it and every byte figure adds up, and
    /// each key reads what a plain map says it holds.
    #[test]
    fn dedup_counts_stay_exact(batches in prop::collection::vec(prop::collection::vec(arb_op(), 1..12), 1..20), small in any::<bool>()) {
        let mut config = two_tenants(KvMode::Cache, if small { 9_000 } else { 1 << 20 });
        config.dedup_min_bytes = 256;
        let node = rt().block_on(Node::open(&config, None)).unwrap();
        let a = Caller { node: &node, tenant: "alpha", secret: "pa" };
        rt().block_on(async {
            let mut model = Model::default();
            for (i, ops) in batches.into_iter().enumerate() {
                let answers = a.run(ops.clone()).await;
                // Evictions (a small tenant) are not the model's to predict.
                if !small {
                    for (op, answer) in ops.into_iter().zip(&answers) {
                        model.apply(op, answer);
                    }
                }
                if i % 7 == 6 {
                    a.call(KvRequest::FlushAll { at: Expiry::Never }).await;
                    model.items.clear();
                }
                node.audit().unwrap();
            }
            node.sweep().await;
            node.audit().unwrap();
            if !small {
                for k in 0u8..6 {
                    let key = String::from_utf8(vec![b'k', k]).unwrap();
                    let want = model.items.get(&vec![b'k', k]).map(|(v, _)| Bytes::from(v.clone()));
                    assert_eq!(a.value(&key).await, want, "key {key}");
                }
            }
        });
    }
}

/// What a plain map says each key holds (value, CAS), fed with the
/// answers so CAS values and refusals are the node's.
#[derive(Default)]
struct Model {
    items: std::collections::HashMap<Vec<u8>, (Vec<u8>, u64)>,
}

impl Model {
    fn apply(&mut self, op: KvOp, answer: &KvAnswer) {
        let key = op.key().to_vec();
        let present = self.items.get(&key).cloned();
        match op {
            KvOp::Get { .. } => {
                assert_eq!(
                    present.is_some(),
                    matches!(answer, KvAnswer::Value(_)),
                    "{answer:?}"
                );
            }
            KvOp::Store {
                mode,
                expiry,
                value,
                ..
            } => {
                let value = value.to_vec();
                let new = match (mode, &present) {
                    (StoreMode::Set, _) | (StoreMode::Add, None) => Some(value),
                    (StoreMode::Replace, Some(_)) => Some(value),
                    (StoreMode::Append, Some((old, _))) => Some([old.clone(), value].concat()),
                    (StoreMode::Prepend, Some((old, _))) => Some([value, old.clone()].concat()),
                    (StoreMode::Cas(c), Some((_, have))) if c == *have => Some(value),
                    _ => None,
                };
                match new {
                    Some(v) => {
                        let KvAnswer::Stored { cas } = answer else {
                            panic!("{mode:?} over {present:?} answered {answer:?}")
                        };
                        if expiry == Expiry::Never
                            || matches!(mode, StoreMode::Append | StoreMode::Prepend)
                        {
                            self.items.insert(key, (v, *cas));
                        } else {
                            self.items.remove(&key);
                        }
                    }
                    None => assert!(
                        !matches!(answer, KvAnswer::Stored { .. }),
                        "{mode:?}: {answer:?}"
                    ),
                }
            }
            KvOp::Delete { .. } => {
                assert_eq!(present.is_some(), *answer == KvAnswer::Deleted);
                self.items.remove(&key);
            }
            KvOp::Touch { expiry, .. } => {
                assert_eq!(present.is_some(), *answer == KvAnswer::Touched);
                if expiry != Expiry::Never {
                    self.items.remove(&key);
                }
            }
            KvOp::Arith { .. } => match answer {
                KvAnswer::Number { value, cas } => {
                    self.items
                        .insert(key, (value.to_string().into_bytes(), *cas));
                }
                KvAnswer::Failed {
                    kind: FailKind::NonNumeric,
                    ..
                } => assert!(present.is_some()),
                other => panic!("arith answered {other:?}"),
            },
        }
    }
}

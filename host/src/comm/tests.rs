//! Unit tests of the communicator: the LSA rule, team arithmetic against a brute-force
//! reference, node descriptions, options, and in-process communicators.

use super::*;

/// Node of every rank for a list of node sizes, nodes in order.
fn layout(sizes: &[usize]) -> Vec<usize> {
    sizes
        .iter()
        .enumerate()
        .flat_map(|(node, &n)| std::iter::repeat_n(node, n))
        .collect()
}

#[test]
fn lsa_size_is_the_gcd_of_same_node_runs() {
    assert_eq!(lsa_size_of(&layout(&[8]), None), 8);
    assert_eq!(lsa_size_of(&layout(&[8, 8]), None), 8);
    assert_eq!(lsa_size_of(&layout(&[8, 8, 4]), None), 4);
    assert_eq!(lsa_size_of(&layout(&[6, 4]), None), 2);
    assert_eq!(lsa_size_of(&layout(&[1]), None), 1);
    assert_eq!(lsa_size_of::<u64>(&[], None), 1);
    // Ranks of a node not contiguous in world order: runs of one.
    assert_eq!(lsa_size_of(&[0, 1, 0, 1, 0, 1, 0, 1], None), 1);
    assert_eq!(lsa_size_of(&[0, 0, 1, 1, 0, 0, 1, 1], None), 2);
}

#[test]
fn lsa_cap_can_shrink_but_never_widen_teams() {
    assert_eq!(lsa_size_of(&layout(&[8]), Some(4)), 4);
    assert_eq!(lsa_size_of(&layout(&[8]), Some(3)), 1);
    assert_eq!(lsa_size_of(&layout(&[8, 8]), Some(16)), 8);
    assert_eq!(lsa_size_of(&layout(&[8, 8, 4]), Some(2)), 2);
}

/// Brute force: for every layout and every rank, the LSA and rail teams partition the world
/// as intended and agree with the device crate's `Team::to_world`.
#[test]
fn teams_and_conversions_agree_with_a_brute_force_reference() {
    let layouts: Vec<Vec<usize>> = vec![
        layout(&[8]),
        layout(&[8, 8]),
        layout(&[8, 8, 4]),
        layout(&[2, 2, 2]),
        layout(&[1]),
        vec![0, 1, 0, 1],
        vec![0, 0, 1, 1, 0, 0],
    ];
    for nodes in &layouts {
        let size = nodes.len() as i32;
        let lsa = lsa_size_of(nodes, None) as i32;
        assert_eq!(size % lsa, 0);
        for me in 0..size {
            let world = Team::new(size, me, 1);
            let lsa_team = team_inner_factor(world, lsa);
            let rail = team_outer_factor(world, lsa);
            assert_eq!(lsa_team, Team::new(lsa, me % lsa, 1));
            assert_eq!(rail, Team::new(size / lsa, me / lsa, lsa));
            let lsa_members: Vec<i32> = (0..lsa_team.n_ranks)
                .map(|r| lsa_team.to_world(me, r))
                .collect();
            let rail_members: Vec<i32> = (0..rail.n_ranks).map(|r| rail.to_world(me, r)).collect();
            // LSA team: the aligned block containing me, all on my node.
            let block = (me / lsa) * lsa;
            assert_eq!(lsa_members, (block..block + lsa).collect::<Vec<_>>());
            for &w in &lsa_members {
                assert_eq!(nodes[w as usize], nodes[me as usize], "{nodes:?}");
            }
            // Rail team: same LSA index in every LSA team.
            assert_eq!(
                rail_members,
                (0..size / lsa)
                    .map(|t| t * lsa + me % lsa)
                    .collect::<Vec<_>>()
            );
            // Membership and conversions, for every world peer.
            for w in 0..size {
                let in_lsa = lsa_members.contains(&w);
                let in_rail = rail_members.contains(&w);
                assert_eq!(team_rank_is_member(lsa_team, world, w), in_lsa);
                assert_eq!(team_rank_is_member(rail, world, w), in_rail);
                if in_lsa {
                    let r = team_rank_to_team(lsa_team, world, w);
                    assert_eq!(lsa_team.to_world(me, r), w);
                }
                if in_rail {
                    let r = team_rank_to_team(rail, world, w);
                    assert_eq!(rail.to_world(me, r), w);
                    assert_eq!(team_rank_to_team(world, rail, r), w);
                }
            }
        }
    }
}

#[test]
fn team_helpers_answer_extreme_values_exactly_instead_of_overflowing() {
    let world = Team::new(8, 0, 1);
    let reversed = Team::new(4, 0, -1);
    // i32::MIN / -1 and i32::MIN % -1: index 2^31 is no member and no i32.
    assert!(!team_rank_is_member(reversed, world, i32::MIN));
    assert_eq!(team_rank_to_team(reversed, world, i32::MIN), -1);
    // i32::MAX - (-1) overflows the distance.
    let odd = Team::new(2, -1, 1);
    assert!(!team_rank_is_member(world, odd, i32::MAX));
    assert_eq!(team_rank_to_team(world, odd, i32::MAX), -1);
    // Distances beyond i32 that still land on a member are members.
    let wide = Team::new(4, 0, 1 << 30);
    assert!(team_rank_is_member(wide, wide, 3));
    assert_eq!(team_rank_to_team(wide, wide, 3), 3);
    assert!(!team_rank_is_member(wide, wide, 4));
    // Empty teams and a zero stride.
    assert!(!team_rank_is_member(Team::new(0, 0, 1), world, 0));
    assert!(!team_rank_is_member(Team::new(1, 0, 0), world, 1));
    assert!(team_rank_is_member(Team::new(1, 0, 0), world, 0));
    assert_eq!(team_rank_to_team(Team::new(1, 0, 0), world, i32::MIN), 0);
    // An outer factor whose stride overflows is the empty team; small n are clamped.
    assert_eq!(team_outer_factor(wide, 4), Team::new(0, 0, 0));
    assert_eq!(team_outer_factor(world, i32::MIN), world);
    assert_eq!(team_inner_factor(world, 0), Team::new(0, 0, 1));
    let comms = Communicator::init_threads_with(2, Duration::from_secs(10), |_| CommOptions::new())
        .unwrap();
    let far = Team::new(2, 0, i32::MAX);
    assert_eq!(comms[0].team_rank_to_world(far, 1), i32::MAX);
    assert_eq!(comms[1].team_rank_to_world(far, 1), -1);
    assert_eq!(comms[1].team_rank_to_world(far, i32::MIN), -1);
    assert_eq!(comms[1].team_rank_to_lsa(far, 1), -1);
    assert_eq!(comms[1].team_rank_to_world(Team::new(2, 1, 1), 0), 0);
}

#[test]
fn node_descriptions_round_trip_and_reject_garbage() {
    let i = RankInfo {
        node: 42,
        name: "gpu-node-7".into(),
        device: 3,
        pid: 4711,
    };
    assert_eq!(decode_info(&encode_info(&i)), Some(i));
    assert_eq!(decode_info(b"short"), None);
    let mut b = encode_info(&RankInfo {
        node: 1,
        name: "n".into(),
        device: 0,
        pid: 1,
    });
    b.push(0);
    assert_eq!(decode_info(&b), None);
    b.truncate(10);
    assert_eq!(decode_info(&b), None);
}

#[test]
fn a_device_shared_by_two_processes_of_a_node_is_found() {
    let r = |node, device, pid| RankInfo {
        node,
        name: format!("n{node}"),
        device,
        pid,
    };
    // One process per GPU, and several threads of one process on one GPU: fine.
    assert_eq!(
        shared_device_across_processes(&[r(1, 0, 10), r(1, 1, 11), r(1, 1, 11)]),
        None
    );
    // The same device number on two nodes is two devices.
    assert_eq!(
        shared_device_across_processes(&[r(1, 0, 10), r(2, 0, 10)]),
        None
    );
    // Two processes on device 1 of node 1: ranks 1 and 3.
    assert_eq!(
        shared_device_across_processes(&[r(1, 0, 10), r(1, 1, 11), r(2, 1, 12), r(1, 1, 13)]),
        Some((1, 3, 1))
    );
}

#[test]
fn options_from_the_environment_are_validated() {
    let o = CommOptions::from_lookup(|k| match k {
        "SYMCOMM_DEVICE" => Some("2".into()),
        "SYMCOMM_NODE_ID" => Some("a".into()),
        "SYMCOMM_LSA_SIZE" => Some("4".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(o, CommOptions::new().device(2).node_id("a").lsa_size(4));
    let e =
        CommOptions::from_lookup(|k| (k == "SYMCOMM_LSA_SIZE").then(|| "x".into())).unwrap_err();
    assert!(matches!(e, Error::Env { .. }), "{e}");
}

fn threads_with_nodes(nodes: &'static [&'static str], cap: usize) -> Vec<Communicator> {
    Communicator::init_threads_with(nodes.len(), Duration::from_secs(10), |r| {
        CommOptions::new().node_id(nodes[r]).lsa_size(cap)
    })
    .unwrap()
}

#[test]
fn in_process_communicators_derive_teams_from_declared_nodes() {
    const NODES: &[&str] = &["a", "a", "a", "a", "b", "b", "b", "b", "c", "c"];
    let comms = threads_with_nodes(NODES, 0);
    for (r, c) in comms.iter().enumerate() {
        assert_eq!((c.rank(), c.size(), c.device()), (r, 10, 0));
        assert_eq!(c.lsa_size(), 2);
        assert_eq!(c.node_count(), 3);
        assert_eq!(c.node_name(), NODES[r]);
        assert_eq!(c.world_team(), Team::new(10, r as i32, 1));
        assert_eq!(c.lsa_team(), Team::new(2, (r % 2) as i32, 1));
        assert_eq!(c.rail_team(), Team::new(5, (r / 2) as i32, 2));
        assert_eq!(c.team_rank_to_world(c.rail_team(), 4), (8 + r % 2) as i32);
        assert_eq!(c.team_rank_to_lsa(c.lsa_team(), 1), 1);
        let block = r / 2 * 2;
        assert_eq!(c.lsa_team_ranks(), vec![block, block + 1]);
    }
    let capped = threads_with_nodes(&["a", "a", "a", "a"], 2);
    assert!(capped.iter().all(|c| c.lsa_size() == 2));
}

#[test]
fn init_threads_puts_rank_r_on_device_r() {
    let comms = Communicator::init_threads(3).unwrap();
    for (r, c) in comms.iter().enumerate() {
        assert_eq!((c.rank(), c.device(), c.device_of(2)), (r, r, Some(2)));
        assert_eq!(c.node_count(), 1);
        assert_eq!(c.lsa_size(), 3);
        assert_eq!(c.rail_team(), Team::new(1, 0, 3));
    }
}

#[test]
fn ranks_with_different_team_settings_all_get_the_same_mismatch() {
    // Before: rank 1 capped its LSA team at 1 and rank 0 did not; both returned Ok with
    // different teams (a later kernel would wait for a peer that is not in its team).
    let err = Communicator::init_threads_with(2, Duration::from_secs(10), |r| {
        CommOptions::new().lsa_size(if r == 1 { 1 } else { 0 })
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert_eq!(
        err,
        "setting SYMCOMM_LSA_SIZE differs across ranks: rank 0 has unset, rank 1 has 1"
    );
    // Equal settings agree.
    let comms = Communicator::init_threads_with(2, Duration::from_secs(10), |_| {
        CommOptions::new().lsa_size(1)
    })
    .unwrap();
    assert_eq!(comms[1].lsa_size(), 1);
}

/// Runs `f` on every communicator, each on a thread of its own, and returns the results by
/// rank.
fn on_threads<T: Send>(comms: Vec<Communicator>, f: impl Fn(&Communicator) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = comms.into_iter().map(|c| s.spawn(move || f(&c))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn split_children_have_their_own_ranks_teams_and_bootstrap() {
    const NODES: &[&str] = &["a", "a", "a", "b", "b", "b"];
    let out = on_threads(threads_with_nodes(NODES, 0), |c| {
        let r = c.rank();
        // By node: the node's ranks in order, one node, one LSA team.
        let node = c.split(Some((r / 3) as u32), r as i32).unwrap().unwrap();
        assert_eq!(
            (node.size(), node.rank(), node.node_count(), node.lsa_size()),
            (3, r % 3, 1, 3)
        );
        assert_ne!(node.bootstrap().job_id(), c.bootstrap().job_id());
        // Its own bootstrap: an all-gather among the node's ranks only.
        let got = node.bootstrap().all_gather(&[r as u8]).unwrap();
        let want: Vec<Vec<u8>> = (0..3).map(|k| vec![(r / 3 * 3 + k) as u8]).collect();
        assert_eq!(got, want);
        // By parity, keys backwards: ranks 4, 2, 0 and 5, 3, 1; nodes a, a, b → LSA 1 (runs
        // of one node: b, a, a has runs 1 and 2).
        let par = c.split(Some((r % 2) as u32), -(r as i32)).unwrap().unwrap();
        assert_eq!((par.size(), par.rank()), (3, (5 - r) / 2));
        assert_eq!(par.node_count(), 2);
        assert_eq!(par.lsa_size(), 1);
        // No color for rank 0: it takes part and gets nothing.
        let rest = c.split((r != 0).then_some(3), 0).unwrap();
        assert_eq!(
            rest.as_ref().map(|k| (k.size(), k.rank())),
            (r != 0).then(|| (5, r - 1))
        );
        // The parent still works, and outlives or dies before its children alike.
        c.bootstrap().barrier().unwrap();
        drop(node);
        par.bootstrap().barrier().unwrap();
        (r, par.rank())
    });
    assert_eq!(out.len(), 6);
}

#[test]
fn a_split_whose_color_disagrees_on_child_settings_fails_every_rank_alike() {
    let comms = Communicator::init_threads(4).unwrap();
    let errors = on_threads(comms, |c| {
        let r = c.rank();
        // Color 0 is ranks 0 and 2; rank 2 caps its child's LSA team, rank 0 does not.
        let cap = if r == 2 { 1 } else { 0 };
        let options = CommOptions::new().lsa_size(cap);
        c.split_with(Some((r % 2) as u32), 0, options)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    });
    let want = "split: color 0's child setting SYMCOMM_LSA_SIZE differs across ranks: rank 0 \
                has unset, rank 2 has 1";
    assert!(errors.iter().all(|e| e == want), "{errors:?}");
}

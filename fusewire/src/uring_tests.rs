use super::*;

#[test]
fn fewer_threads_than_queues_share_the_queues_out() {
    assert_eq!(queues_of(0, 2, 4), vec![0, 2]);
    assert_eq!(queues_of(1, 2, 4), vec![1, 3]);
    assert_eq!(queues_of(0, 1, 3), vec![0, 1, 2]);
    assert_eq!(depth_of(1, 2, 4, 32), 32);
}

#[test]
fn more_threads_than_queues_take_turns_and_share_each_queues_depth() {
    // 5 threads on 2 queues: queue 0 has threads 0, 2, 4; queue 1 has 1 and 3.
    let on: Vec<Vec<usize>> = (0..5).map(|t| queues_of(t, 5, 2)).collect();
    assert_eq!(on, vec![vec![0], vec![1], vec![0], vec![1], vec![0]]);
    let depths: Vec<usize> = (0..5).map(|t| depth_of(t, 5, 2, 32)).collect();
    assert_eq!(depths, vec![11, 16, 11, 16, 10]);
    // Each queue's entries add up to its depth, odd ones too.
    for (threads, queues, depth) in [(4, 2, 33), (3, 1, 32), (4, 1, 4), (6, 2, 5)] {
        for q in 0..queues {
            let sum: usize = (q..threads)
                .step_by(queues)
                .map(|t| depth_of(t, threads, queues, depth))
                .sum();
            assert_eq!(
                sum, depth,
                "{threads} threads, {queues} queues, depth {depth}"
            );
        }
    }
}

pop_common::main!(lists_gen_crawlers);

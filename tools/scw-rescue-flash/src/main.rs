pop_common::main!(scw_rescue_flash);

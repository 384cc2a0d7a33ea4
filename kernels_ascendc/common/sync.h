// Ordering between the AI Core's pipes (MTE2 copy-in, V vector, S scalar, MTE3 copy-out).
//
// The kernel hands buffers from one pipe to another explicitly: each hand-over waits until the
// producer pipe has finished, so the consumer never sees a half-written buffer.
#pragma once
#include "kernel_operator.h"

template <AscendC::HardEvent E>
__aicore__ inline void wait_for() {
    const int32_t id = static_cast<int32_t>(GetTPipePtr()->FetchEventID(E));
    AscendC::SetFlag<E>(id);
    AscendC::WaitFlag<E>(id);
}

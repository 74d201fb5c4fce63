// fashion_mnist --data=tasks without --elastic: the training loop of a static group (the
// launcher's plain job, restarted whole by paddlerun --max-restarts) whose samples come from the
// task master, exactly once per epoch across a restart from a checkpoint (Note [Static task
// positions] in fashion_mnist_task_group.cc). fashion_mnist.cc parses the flags into the same
// ElasticRun the elastic loop takes; the fields an elastic job alone uses are ignored.
#ifndef EXAMPLES_FASHION_MNIST_TASK_GROUP_H_
#define EXAMPLES_FASHION_MNIST_TASK_GROUP_H_

#include "examples/fashion_mnist_elastic.h"

namespace paddle::examples {

// Trains to the end as one rank of the launched group in the environment; returns the exit
// status.
int RunTaskGroup(const ElasticRun& run);

}  // namespace paddle::examples

#endif  // EXAMPLES_FASHION_MNIST_TASK_GROUP_H_

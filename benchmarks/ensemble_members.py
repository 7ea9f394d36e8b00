"""What an ensemble gains over its members: each member of an ``--ensemble`` job scored alone, and their mean.

    python -m benchmarks.ensemble_members work/abl30_ens/ensemble2 --data-dir work/cifar-10-full

Restores each member's variables from the job's last checkpoint into the network alone (the
job's hparams.json, ``--ensemble 1``), scores it on the test split (``eval.tfrecords``), then the
mean of the members' logits, which is what the job's own evaluation and exports compute; and how
often two members agree. Prints a table and writes JSON with the CPU.
"""

import argparse
import dataclasses
import itertools

import numpy as np

from benchmarks.common import print_machine, write_result
from estimator.data import records as fmt
from estimator.networks import ensemble
from estimator.training import config


def test_images(data_dir: str):
    """The test split's images and labels, in file order, as numpy arrays."""
    from estimator.data.pipeline import Cifar10DataSet

    images, labels = [], []
    for x, y in Cifar10DataSet(data_dir, fmt.TEST, use_distortion=False).dataset(500):
        images.append(x.numpy())
        labels.append(y.numpy())
    images, labels = np.concatenate(images), np.concatenate(labels)
    real = labels != fmt.PAD_LABEL  # the last batch is padded to the batch size
    return images[real], labels[real]


def member_logits(hp, checkpoint: str, images, batch_size: int = 500) -> list:
    """Each member's float32 logits ``[n, 10]`` for ``images``, the member restored alone into the network."""
    import tensorflow as tf

    from estimator.networks import registry

    v1 = tf.compat.v1
    alone = dataclasses.replace(hp, ensemble=1)
    out = []
    for member in range(1, hp.ensemble + 1):
        with tf.Graph().as_default():
            x = v1.placeholder(tf.float32, [None, fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH])
            with v1.variable_scope("resnet"):
                logits = registry.build(alone, False).forward_pass(x)
            scope = "resnet/%s/" % (ensemble.MEMBER_SCOPE % member)
            saver = v1.train.Saver({scope + v.op.name[len("resnet/") :]: v for v in v1.global_variables()})
            with v1.Session() as sess:
                saver.restore(sess, checkpoint)
                out.append(
                    np.concatenate(
                        [sess.run(logits, {x: images[i : i + batch_size]}) for i in range(0, len(images), batch_size)]
                    )
                )
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("job_dir", help="The job dir of a run with --ensemble 2 or more.")
    parser.add_argument("--data-dir", required=True, help="Records with the test split (eval.tfrecords).")
    parser.add_argument("--out", default="benchmarks/results/ensemble_members.json")
    args = parser.parse_args(argv)
    import tensorflow as tf

    hp = config.load(args.job_dir)
    if hp.ensemble < 2:
        raise SystemExit("%s trained one network (--ensemble %d): nothing to compare." % (args.job_dir, hp.ensemble))
    checkpoint = tf.train.latest_checkpoint(args.job_dir)
    if checkpoint is None:
        raise SystemExit("%s holds no checkpoint." % args.job_dir)
    print_machine()
    images, labels = test_images(args.data_dir)
    logits = member_logits(hp, checkpoint, images)
    members = [float(np.mean(m.argmax(1) == labels)) for m in logits]
    mean = float(np.mean((sum(logits) / len(logits)).argmax(1) == labels))
    agree = [float(np.mean(a.argmax(1) == b.argmax(1))) for a, b in itertools.combinations(logits, 2)]
    print("%s, %s, %d test images" % (checkpoint, hp.precision, len(labels)))
    for i, accuracy in enumerate(members):
        print("  member %d alone    %.2f%%" % (i + 1, 100 * accuracy))
    print("  mean of logits    %.2f%%  (+%.2f over the members' mean)" % (100 * mean, 100 * (mean - np.mean(members))))
    print("  pairs agreeing    %s" % " ".join("%.2f%%" % (100 * a) for a in agree))
    write_result(
        args.out,
        {
            "job_dir": args.job_dir,
            "checkpoint": checkpoint,
            "precision": hp.precision,
            "test_images": int(len(labels)),
            "member_accuracy": members,
            "ensemble_accuracy": mean,
            "pairs_agreeing": agree,
        },
    )


if __name__ == "__main__":
    main()

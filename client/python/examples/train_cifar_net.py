"""Seed 001 ("Training a Classifier", PyTorch's CIFAR-10 tutorial) on a tensord server.

The tutorial's Net, loss, optimizer, loop, save/reload and accuracy
cells, line for line, with `torch` spelt `tensord` (autograd and SGD run on
the server; no gradient math here). Without --data it trains on
tensord.data.synthetic_patterns (10 classes of spatial patterns; no
download); --data DIR trains on CIFAR-10's binary batches
(cifar-10-batches-bin). Prints the seed's "[epoch, batch] loss" lines, saves
the weights as safetensors with PyTorch's key names (the tutorial's Net
loads them), reloads them into a new Net as the seed does and prints the
accuracy on held-out images; exits 1 below --min-accuracy.

    python3 train_cifar_net.py [--address HOST:PORT] [--device cuda:0] [--data DIR] [--epochs 2]
        [--batch-size 8] [--lr 0.01] [--train 4000] [--test 1000]
        [--log-every 100] [--out cifar_net.safetensors] [--per-class]
        [--capture] [--min-accuracy 0]

Where the seed's lines changed, and why:
  * `torch.device(...)`, `torch.cuda` -> the client's (the GPU is the server's);
  * torchvision's dataset and DataLoader -> tensord.data's, whose batches are
    tensors on the server's cpu device (the seed's host memory), so
    `data[0].to(device)` moves them as in the seed;
  * `torch.save`/`torch.load` of a .pth -> tensord.save/load of safetensors;
  * `torch.max(outputs.data, 1)` -> `outputs.data.max(1)` (the method form);
  * `for i in range(4)` -> the batch's size (the seed hard-codes its batch 4).
The defaults are the C++ example's for the synthetic set (batch 8, lr 0.01:
over 90% in 1,000 steps); the seed's own (batch 4, lr 0.001) need its 25,000
steps. --capture records the training step once (client.capture) and
replays it as one RunProgram per batch (a program the server planned once)
instead of the eager ops.
"""
import argparse
import sys
import time

import tensord
import tensord.data
import tensord.nn as nn
import tensord.nn.functional as F
import tensord.optim as optim


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="HOST:PORT (else $TENSORD_ADDRESS)")
    parser.add_argument("--device", default=None,
                        help="where to train (else cuda:0 when the server has a GPU, else cpu)")
    parser.add_argument("--data", default=None, help="CIFAR-10 binary batches (else synthetic)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--train", type=int, default=4000, help="synthetic training images")
    parser.add_argument("--test", type=int, default=1000, help="synthetic held-out images")
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1, help="initial weights and shuffling")
    parser.add_argument("--out", default="cifar_net.safetensors")
    parser.add_argument("--per-class", action="store_true",
                        help="also the seed's per-class accuracy cell")
    parser.add_argument("--capture", action="store_true",
                        help="replay a captured step (one RunProgram per batch)")
    parser.add_argument("--min-accuracy", type=float, default=0)
    return parser.parse_args(argv)


def main(argv=None, client=None):
    """Trains and evaluates as the seed does; returns the held-out accuracy in %.
    Connects to --address, or uses `client` (then the default client) and
    leaves it open."""
    args = parse_args(argv)
    own_client = client is None
    if own_client:
        client = tensord.connect(args.address)
    device = client.device("cuda:0" if client.cuda.is_available() else "cpu")
    if args.device:
        device = client.device(args.device)
    print(f"training on {device}")

    if args.data:
        trainset = tensord.data.load_cifar10(args.data, train=True)
        testset = tensord.data.load_cifar10(args.data, train=False)
    else:
        trainset = tensord.data.synthetic_patterns(args.train, seed=2026)
        testset = tensord.data.synthetic_patterns(args.test, seed=7)
    trainloader = tensord.data.DataLoader(trainset, batch_size=args.batch_size,
                                          shuffle=True, seed=args.seed)
    testloader = tensord.data.DataLoader(testset, batch_size=100, shuffle=False)
    classes = trainset.classes
    print(f"{len(trainset)} training images, {len(testset)} held out "
          f"({'CIFAR-10' if args.data else 'synthetic'})")

    client.manual_seed(args.seed)
    net = Net()
    net.to(device)

    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)

    def train_step(inputs, labels):
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        return loss

    captured = []  # the CapturedStep, once the first batch has made it

    def replayed_step(inputs, labels):
        """train_step, recorded at the first batch, then replayed (the step
        registers a program per batch shape itself: the last, smaller batch
        of an epoch gets its own)."""
        if not captured:
            losses = []

            def recorded_step(x, y):
                losses.append(train_step(x, y))
                return losses[0]

            captured.append(client.capture(recorded_step, inputs, labels))
            return losses[0]
        return captured[0](inputs, labels)

    started = time.monotonic()
    for epoch in range(args.epochs):  # loop over the dataset multiple times
        running_loss = 0.0
        for i, data in enumerate(trainloader, 0):
            # get the inputs; data is a list of [inputs, labels]
            inputs, labels = data[0].to(device), data[1].to(device)

            if args.capture:
                loss = replayed_step(inputs, labels)
            else:
                # zero the parameter gradients
                optimizer.zero_grad()

                # forward + backward + optimize
                outputs = net(inputs)
                loss = criterion(outputs, labels)
                loss.backward()
                optimizer.step()

            # print statistics
            running_loss += loss.item()
            if i % args.log_every == args.log_every - 1:
                print('[%d, %5d] loss: %.3f' %
                      (epoch + 1, i + 1, running_loss / args.log_every), flush=True)
                running_loss = 0.0

    print('Finished Training')
    train_seconds = time.monotonic() - started

    PATH = args.out
    tensord.save(net.state_dict(), PATH)

    net = Net()
    net.load_state_dict(tensord.load(PATH))

    correct = 0
    total = 0
    with tensord.no_grad():
        for data in testloader:
            images, labels = data
            outputs = net(images)
            _, predicted = outputs.data.max(1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()

    accuracy = 100 * correct / total
    print('Accuracy of the network on the %d test images: %d %%' % (total, accuracy))
    print(f"({train_seconds:.1f} s training, "
          f"{train_seconds / max(args.epochs * len(trainloader), 1) * 1e3:.2f} ms a step)")

    if args.per_class:
        class_correct = list(0. for i in range(10))
        class_total = list(0. for i in range(10))
        with tensord.no_grad():
            for data in testloader:
                images, labels = data
                outputs = net(images)
                _, predicted = outputs.max(1)
                c = (predicted == labels).squeeze()
                for i in range(labels.size(0)):
                    label = labels[i]
                    class_correct[label] += c[i].item()
                    class_total[label] += 1

        for i in range(10):
            print('Accuracy of %5s : %2d %%' % (
                classes[i], 100 * class_correct[i] / class_total[i]))

    if own_client:
        client.close()
    return accuracy


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    sys.exit(0 if main(sys.argv[1:]) >= arguments.min_accuracy else 1)

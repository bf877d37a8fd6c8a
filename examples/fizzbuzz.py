"""FizzBuzz, a small example for sharpen: select a region and let the model fill it."""

def fizzbuzz(number: int) -> str:
    """Return the FizzBuzz word for a number."""
    if number % 15 == 0:
        return "FizzBuzz"
    if number % 3 == 0:
        return "Fizz"
    if number % 5 == 0:
        return "Buzz"
    return str(number)


def main() -> None:
    for i in range(1, 101):
        print(fizzbuzz(i))


if __name__ == "__main__":
    main()

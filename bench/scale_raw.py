"""Make a Social-IQ-shaped raw set for the scale benchmarks (testing/scale_raw.py makes it; this is its command).

    python -m bench.scale_raw build/scale 20 --seconds 60     # prints the RAW folder
"""

from testing.scale_raw import main

if __name__ == "__main__":
    main()
